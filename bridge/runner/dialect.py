"""Which Jazz CLI ``runner.command`` is, told by its own ``run --help``, and how to speak it.

Two CLIs answer to ``jazz run --json`` (docs/runner-contract.md). The *documented* one (and
the bundled reference runner) takes the prompt as a JSON line on stdin with
``--interactive-stdin --input-stdin`` and asks a person through events answered on stdin.
The *released* one (lvndry/jazz 0.14.2) rejects those flags (``error: unknown option``, exit
1, no envelope), takes the prompt as its positional argument (or all of stdin, which must
then be closed), reads approval answers from stdin only when the prompt came on argv, needs
``--stream`` for text progress through a pipe, rejects the ``spend`` event category, has no
``jazz daemon``, and prints a different envelope and events. Nothing in between is assumed:
what a binary accepts is read from its help once, cached by the binary's path, size and
mtime (:func:`profile_for`), and ``doctor`` prints it.

A help that matches neither (a wrapper script, a runner that prints none) is taken for the
documented contract, as before, and said so: "assumed", not "detected".
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provisioning.sandbox import DEFAULT_ENV_ALLOWLIST, probe_env

if TYPE_CHECKING:
    from ..config import RunnerSettings

log = logging.getLogger(__name__)

PROFILE_FILE = "runner-cli.json"  # under state/: which CLI runner.command is, and its mtime
HELP_TIMEOUT_S = 30.0  # the released CLI takes ~2 s to load; a slow disk more
CACHE_VERSION = 1
CACHE_MODE = 0o640  # rw-r-----  beside the store, operators may read it
OPTION_RE = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
CATEGORIES_RE = re.compile(r"comma-separated:\s*([a-z][a-z, ]*[a-z])")
COMMAND_LINE_RE = re.compile(r"^\s{2,}([a-z][a-z0-9-]*)\b", re.MULTILINE)
# what 0.14.2's --events takes, when its help does not list them
RELEASED_CATEGORIES = frozenset({"tools", "reasoning", "text", "usage", "approval", "subagent"})
# Node's timers hold at most 2^31-1 ms (~24.8 days): the released CLI's own --timeout counts
# time spent waiting for a person, so it gets this and the gateway keeps the real clock
LONG_TIMEOUT_MS = 2**31 - 1
# Linux caps one argv string at 32 pages (MAX_ARG_STRLEN, its NUL included): a longer
# prompt goes on stdin, where the released CLI cannot also take approvals
MAX_ARGV_PROMPT_BYTES = 32 * 4096 - 1
RISK_ORDER = {"read-only": 0, "low-risk": 1, "high-risk": 2}


class Dialect(enum.StrEnum):
    DOCUMENTED = "documented"
    RELEASED = "released"


@dataclass(frozen=True)
class CliProfile:
    """What one runner binary accepts."""

    dialect: Dialect
    options: frozenset[str] = frozenset()  # the long options ``run --help`` lists
    categories: frozenset[str] | None = None  # what ``--events`` takes, when the help says
    has_daemon: bool = True
    detected: bool = False  # False: its help said nothing known; the documented contract
    version: str | None = None

    @property
    def released(self) -> bool:
        return self.dialect is Dialect.RELEASED

    def describe(self) -> str:
        """One line for ``doctor`` and the start-up log."""
        if not self.detected:
            return (
                "documented contract assumed (its `run --help` names neither "
                "--interactive-stdin nor the released CLI's options)"
            )
        if self.released:
            version = f" {self.version}" if self.version else ""
            return (
                f"released Jazz CLI{version}: prompt as argument, approvals on stdin, "
                f"--stream for text progress, no `jazz daemon`"
            )
        return "documented contract: prompt and answers as JSON on stdin"

    def as_dict(self) -> dict[str, Any]:
        return {
            "dialect": self.dialect.value,
            "options": sorted(self.options),
            "categories": sorted(self.categories) if self.categories is not None else None,
            "has_daemon": self.has_daemon,
            "detected": self.detected,
            "version": self.version,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CliProfile:
        cats = data.get("categories")
        return cls(
            dialect=Dialect(data["dialect"]),
            options=frozenset(str(o) for o in data.get("options") or ()),
            categories=frozenset(str(c) for c in cats) if isinstance(cats, list) else None,
            has_daemon=bool(data.get("has_daemon", True)),
            detected=bool(data.get("detected", False)),
            version=data.get("version") if isinstance(data.get("version"), str) else None,
        )


DOCUMENTED_ASSUMED = CliProfile(Dialect.DOCUMENTED)


def parse_help(
    run_help: str, main_help: str | None = None, version: str | None = None
) -> CliProfile:
    """A profile from the text of ``run --help`` (and of ``--help``, for its commands)."""
    options = frozenset(OPTION_RE.findall(run_help))
    if "--interactive-stdin" in options:
        return CliProfile(Dialect.DOCUMENTED, options, detected=True, version=version)
    if "--stream" in options or ("[prompt]" in run_help and "--agent" in options):
        match = CATEGORIES_RE.search(run_help)
        categories = (
            frozenset(c.strip() for c in match.group(1).split(",") if c.strip()) - {"all"}
            if match
            else RELEASED_CATEGORIES
        )
        commands = set(COMMAND_LINE_RE.findall(_section(main_help or "", "Commands:")))
        return CliProfile(
            Dialect.RELEASED,
            options,
            categories=categories,
            has_daemon="daemon" in commands,
            detected=True,
            version=version,
        )
    return DOCUMENTED_ASSUMED


def _section(text: str, title: str) -> str:
    """The lines of a help text after ``title`` (commander's ``Commands:``)."""
    at = text.find(title)
    return text[at + len(title) :] if at >= 0 else ""


def fingerprint(command: Sequence[str]) -> list[list[Any]]:
    """The files ``command`` names (its program and scripts), with size and mtime: a changed
    or replaced binary is probed again."""
    marks: list[list[Any]] = []
    for i, part in enumerate(command):
        path = shutil.which(part) if i == 0 and os.sep not in part else part
        if not path:
            continue
        with contextlib.suppress(OSError):
            real = os.path.realpath(path)
            st = os.stat(real)
            if os.path.isfile(real):
                marks.append([real, st.st_size, st.st_mtime_ns])
    return marks


def _output(argv: list[str], env: Mapping[str, str]) -> str | None:
    try:
        proc = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=HELP_TIMEOUT_S,
            env=dict(env),
            check=False,
            start_new_session=True,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("runner %s could not be asked for its help: %s", argv[0], exc)
        return None
    return (proc.stdout + b"\n" + proc.stderr).decode("utf-8", "replace")


def probe(command: Sequence[str], env: Mapping[str, str]) -> CliProfile:
    """Ask the binary (blocking): ``run --help``; for the released CLI ``--help`` and
    ``--version`` too (its commands: is there a ``daemon``)."""
    run_help = _output([*command, "run", "--help"], env)
    if run_help is None:
        return DOCUMENTED_ASSUMED
    profile = parse_help(run_help)
    if profile.released:
        main_help = _output([*command, "--help"], env) or ""
        version = (_output([*command, "--version"], env) or "").strip().splitlines()
        profile = parse_help(run_help, main_help, version[0].strip() if version else None)
    return profile


def profile_for(
    command: Sequence[str],
    env: Mapping[str, str],
    cache: Path | None = None,
    *,
    write: bool = True,
) -> CliProfile:
    """The profile of ``command``: from ``cache`` when the binary is unchanged, else probed
    (and written to ``cache`` unless ``write`` is False: doctor only reads). Blocking: call
    it off the event loop."""
    marks = fingerprint(command)
    key = {"version": CACHE_VERSION, "command": list(command), "files": marks}
    if cache is not None and marks:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            data = json.loads(cache.read_text(encoding="utf-8"))
            if data.get("key") == key:
                return CliProfile.from_dict(data["profile"])
    profile = probe(command, env)
    if cache is not None and marks and write:
        try:
            tmp = cache.with_name(f".{cache.name}.tmp")
            tmp.write_text(json.dumps({"key": key, "profile": profile.as_dict()}), "utf-8")
            os.chmod(tmp, CACHE_MODE)
            os.replace(tmp, cache)
        except OSError as exc:
            log.warning("the runner's profile could not be cached in %s: %s", cache, exc)
    return profile


def runner_profile(
    cfg: RunnerSettings,
    command: Sequence[str],
    state_dir: Path | None = None,
    *,
    write: bool = True,
) -> CliProfile:
    """Which CLI ``command`` is, asked in a run's environment (``runner.env_passthrough``,
    ``runner.extra_env``; never the gateway's secrets), cached in ``state_dir``."""
    env = probe_env(allowlist=(*DEFAULT_ENV_ALLOWLIST, *cfg.env_passthrough), extra=cfg.extra_env)
    cache = state_dir / PROFILE_FILE if state_dir is not None else None
    return profile_for(command, env, cache, write=write)


AGENT_FILE_MAX_BYTES = 1 << 20


def template_provider(template: Path | None, agent: str) -> str | None:
    """The model provider (``config.llmProvider``) of ``agent`` in the home template, or
    None: what a run that never names its provider (stopped before its first model call)
    used, for the spend cap. The operator's file, read without following a link."""
    if template is None:
        return None
    path = template / "agents" / f"{agent}.json"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            data = json.loads(fh.read(AGENT_FILE_MAX_BYTES))
    except (OSError, ValueError):
        return None
    config = data.get("config") if isinstance(data, dict) else None
    provider = config.get("llmProvider") if isinstance(config, dict) else None
    return provider if isinstance(provider, str) and provider.strip() else None


def needs_person(data: Mapping[str, Any], policy: str) -> bool:
    """Whether a released CLI's ``approval_required`` waits for a person: it approves by
    itself what its risk level puts at or under the run's policy (``approval_resolved`` with
    ``auto: true`` follows at once). An unknown level waits, as the safe reading."""
    risk = RISK_ORDER.get(str(data.get("riskLevel")))
    allowed = RISK_ORDER.get(str(data.get("autoApprovePolicy") or policy))
    return risk is None or allowed is None or risk > allowed


def flat_tool_call(data: dict[str, Any]) -> dict[str, Any]:
    """A released ``tool_call`` (``{"toolCall": {"id", "function": {"name", "arguments"}}}``)
    in the documented shape (``toolCallId``, ``toolName``, ``arguments``)."""
    call = data.get("toolCall")
    if not isinstance(call, dict):
        return data
    raw = call.get("function")
    function: dict[str, Any] = raw if isinstance(raw, dict) else {}
    flat = dict(data)
    flat.setdefault("toolCallId", call.get("id"))
    flat.setdefault("toolName", function.get("name"))
    flat.setdefault("arguments", function.get("arguments"))
    return flat


def question_of(arguments: Any) -> str | None:
    """The question of an ``ask_user_question`` call (arguments as JSON text or an object)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if isinstance(arguments, dict) and isinstance(arguments.get("question"), str):
        return arguments["question"].strip() or None
    return None
