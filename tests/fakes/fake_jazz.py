#!/usr/bin/env python3
"""A stand-in for the released Jazz CLI 0.14.2 (lvndry/jazz), stdlib only.

Why it exists: the gateway has to work with the Jazz CLI people actually install, which does
not speak the documented contract that ``fake_runner.py`` (and the reference runner) speak.
The real binary needs Bun, a model provider and about 2 s per start, so the tests use this
twin instead. It is built from the recordings of 0.14.2 (docs/runner-contract.md) and from the
CLI's source (``src/cli/cli-app.ts``, ``src/cli/commands/run-agent.ts``,
``src/core/presentation/oneshot-presentation-service.ts``, ``src/app-layer.ts``, the tool
executor, the storage and history services, and commander 15's parser and help), so:

* argv is parsed as commander parses it: ``run [prompt]`` with the options of cli-app.ts,
  the global options anywhere before ``--``, ``error: unknown option '...'`` (exit 1, no
  stdout), ``error: required option '--agent <agentId>' not specified``, too many
  arguments, ``jazz --help`` / ``jazz run --help`` / ``jazz --version``, and
  ``error: unknown command 'daemon'``. Other commands (agent, persona, config, mcp, update,
  workflow, the setup wizard) exist in the help but are not emulated (stderr note, exit 1).
* the prompt is the positional argument, else all of stdin as raw text (held open, it
  waits); an empty prompt gives the "No prompt provided" envelope.
* ``$JAZZ_HOME/config.json`` (or ``--config``/``JAZZ_CONFIG_PATH``) and an agent
  (``agents/<id>.json``, or any ``agents/*.json`` whose ``name`` matches) are needed, else
  ``No agent found with ID: <agent>``. History lives where the real CLI keeps it:
  ``$JAZZ_HOME/history/<agentId>.json``.
* stderr NDJSON for the ``--events`` categories only (``spend`` is refused), every string
  cut to 200 UTF-16 units plus "…"; ``tool_call``, ``text_*`` and ``usage`` events only when
  streaming (``--stream``; stdout is a pipe); the context-window ``warning`` first (a plain
  ``⚠`` line without ``--events``); approvals as the real tool executor does them.
* envelope ``{ok, answer, costUSD, tokenUsage, toolCalls[, webApp][, messages]}``, failures
  ``{"ok":false,"error":...,"costUSD":0}``, exit codes 0 and 1; SIGTERM/SIGINT print
  "Received ... Shutting down..." on stdout and exit 0 without an envelope; once the
  approval reader has attached to stdin the process lives until stdin is closed.

It logs every run as JSON lines in ``$FAKE_DIR/run-<pid namespace>-<pid>-<start>.log``
(pids repeat across PID namespaces) as ``fake_runner.py`` does (``start`` with ``home``
and ``turns``, ``end``, ``spawned``), and obeys the same words in the prompt
(case-sensitive, whole words):

  readprocs         log every command line it can read in /proc (event "procs")
  hold NAME         wait until $FAKE_DIR/release-NAME exists (bounded 60 s; --timeout counts)
  crash             die without an envelope (a stack trace on stderr, exit 1: 0 and 1 only)
  garbage           print a line that is not JSON on stdout, exit 1
  noenvelope        exit 0 printing nothing
  hang              hang far past any timeout, its own --timeout included (as recording 06)
  spawn             start a child and a setsid grandchild that linger; log their pids
  fail500           the provider answers 500: a plain stack trace, no ``error`` event
  artifact-outside  a ``webApp`` whose imagePath is /etc/passwd (htmlPath /etc/hosts)
  approve           execute_command (high-risk) through the real approval flow; answers
                    "the tool was approved" or "the tool was rejected"
  askuser           the ask_user_question tool, which gets "" back (recording 12)
  asklong           the same with a question of 200 lines (cut to 200 characters in events)
  webapp            create_web_app: a static web app written under <jazz home>/webapps
  costly            costUSD 0.25
Otherwise the model reads a file with the "read" tool and answers "fake answer to: <prompt>".

Environment: FAKE_DIR (logs, release files; default /tmp), FAKE_JAZZ_STARTUP_S (start-up
delay before anything, default 0; the real one takes about 2 s), FAKE_JAZZ_TERM_S (how long
it goes on after SIGTERM before exiting, default 0.2), plus what the CLI reads: JAZZ_HOME,
JAZZ_CONFIG_PATH, CI, NO_COLOR.
"""

from __future__ import annotations

import json
import os
import queue
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

VERSION = "0.14.2"
FAKE_DIR = os.environ.get("FAKE_DIR", "/tmp")
BUNDLE = "/usr/local/lib/node_modules/jazz-ai/dist/main.js"
MAX_EVENT_STRING_LENGTH = 200
MAX_CONVERSATION_HISTORY_PER_AGENT = 100
DEFAULT_CONTEXT_WINDOW = 128_000
LOCAL_SERVER_PROVIDERS = {"llamacpp": "http://localhost:8080", "ollama": "http://localhost:11434"}


def pid_namespace() -> str:
    """This process's PID namespace (``pid:[4026531836]``): a run whose prompt is on argv
    starts in one of its own, where its pids (2, 3, ...) repeat from run to run; the tests'
    harness maps them to the host's (gateway_harness.run_events)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


LONG_QUESTION = "\n".join(f"Which colour for part {n} of the long chart?" for n in range(200))


def readable_cmdlines() -> list[str]:
    """Every command line this process can read in its ``/proc``, as a curious agent would."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    found.append(fh.read().replace(b"\0", b" ").decode("utf-8", "replace"))
            except OSError:
                continue
    return found


def start_time() -> int:
    """When this process started, in clock ticks since boot (``/proc/self/stat`` field 22):
    with the PID namespace it tells this process from a later one that got the same pid in
    a namespace that got the same number."""
    try:
        with open("/proc/self/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


def log(event: dict) -> None:
    """One log file per process (runs of different accounts can't share one file), named
    by its PID namespace and start too: pids repeat across namespaces."""
    event.setdefault("t", time.monotonic())
    ns = pid_namespace()
    event.setdefault("pidns", ns)
    event.setdefault("started", start_time())
    tag = "".join(ch for ch in ns if ch.isdigit())
    name = f"run-{tag}-{os.getpid()}-{event['started']}.log"
    with open(os.path.join(FAKE_DIR, name), "a") as fh:
        fh.write(json.dumps(event) + "\n")


# -- output as Bun writes it ---------------------------------------------------------------

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def js_json(value: Any) -> str:
    """JSON.stringify: compact, non-ASCII kept, lone surrogates escaped."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def cut(value: str) -> str:
    """truncateString of the one-shot presentation service (JS length = UTF-16 units)."""
    units = value.encode("utf-16-le", "surrogatepass")
    if len(units) // 2 <= MAX_EVENT_STRING_LENGTH:
        return value
    return units[: 2 * MAX_EVENT_STRING_LENGTH].decode("utf-16-le", "surrogatepass") + "…"


def cut_all(value: Any) -> Any:
    """The JSON.stringify replacer: every string value (never a key) is cut."""
    if isinstance(value, str):
        return cut(value)
    if isinstance(value, dict):
        return {k: cut_all(v) for k, v in value.items()}
    if isinstance(value, list):
        return [cut_all(v) for v in value]
    return value


def js_number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _write(fd: int, text: str) -> None:
    data = _LONE_SURROGATE.sub("\ufffd", text).encode("utf-8")
    while data:
        data = data[os.write(fd, data) :]


def out(text: str) -> None:
    _write(1, text)


def err(text: str) -> None:
    _write(2, text)


# -- commander 15, as far as jazz uses it ------------------------------------------------------


class CliExit(Exception):
    """process.exit(code), as commander and the CLI call it."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def camelcase(name: str) -> str:
    head, *rest = name.split("-")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


class Opt:
    def __init__(
        self,
        flags: str,
        description: str,
        parse: Callable[[str], Any] | None = None,
        mandatory: bool = False,
        version: bool = False,
    ) -> None:
        self.flags, self.description, self.parse = flags, description, parse
        self.mandatory, self.version = mandatory, version
        self.short = self.long = None
        self.takes_value = False
        for token in re.split(r"[ |,]+", flags):
            if token.startswith(("<", "[")):
                self.takes_value = True
            elif token.startswith("--"):
                self.long = token
            elif token.startswith("-"):
                self.short = token
        self.negate = bool(self.long and self.long.startswith("--no-"))
        base = self.long[2:] if self.long else (self.short or "-")[1:]
        self.attr = camelcase(base[3:] if self.negate else base)

    def matches(self, arg: str) -> bool:
        return arg in (self.short, self.long)


HELP_OPTION = Opt("-h, --help", "display help for command")


def positive_int(label: str) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        if not re.fullmatch(r"\d+", raw) or int(raw) <= 0:
            # parsePositiveInt throws a plain Error; commander rethrows it and main.ts
            # reports it as a fatal error (exit 1).
            err(
                f'Fatal error: Error: {label} must be a positive integer (got "{raw}").\n'
                f"      at <anonymous> ({BUNDLE}:1:1)\n"
            )
            raise CliExit(1)
        return int(raw)

    return parse


class Cmd:
    def __init__(
        self,
        name: str,
        description: str = "",
        *,
        aliases: tuple[str, ...] = (),
        args: tuple[str, ...] = (),
        options: tuple[Opt, ...] = (),
        action: Callable[[Cmd], int] | None = None,
        stub: bool = False,
        version: str | None = None,
    ) -> None:
        self.name, self.description, self.aliases = name, description, aliases
        self.arg_names = args
        self.options = list(options)
        self.action, self.stub = action, stub
        self.version = version
        if version is not None:
            self.options.insert(0, Opt("-V, --version", "output the version number", version=True))
        self.commands: list[Cmd] = []
        self.parent: Cmd | None = None
        self.values: dict[str, Any] = {}
        self.args: list[str] = []
        for opt in self.options:  # --no-foo defaults foo to true unless --foo exists
            if opt.negate and not self.find_option("--" + opt.long[5:]):
                self.values[opt.attr] = True

    def add(self, sub: Cmd) -> None:
        sub.parent = self
        self.commands.append(sub)

    def find_option(self, arg: str) -> Opt | None:
        return next((o for o in self.options if o.matches(arg)), None)

    def find_command(self, name: str | None) -> Cmd | None:
        return next((c for c in self.commands if name in (c.name, *c.aliases)), None)

    def has_help_command(self) -> bool:
        return bool(self.commands) and self.action is None and not self.find_command("help")

    def lineage(self) -> list[Cmd]:
        cmd: Cmd | None = self
        chain = []
        while cmd is not None:
            chain.append(cmd)
            cmd = cmd.parent
        return chain

    def error(self, message: str) -> None:
        err(message + "\n")
        raise CliExit(1)

    def assign(self, opt: Opt, value: str | None) -> None:
        if opt.version:
            out(f"{self.version}\n")
            raise CliExit(0)
        if opt.takes_value:
            self.values[opt.attr] = opt.parse(value) if opt.parse else value
        else:
            self.values[opt.attr] = not opt.negate

    def parse_options(self, args: list[str]) -> tuple[list[str], list[str]]:
        operands: list[str] = []
        unknown: list[str] = []
        dest = operands

        def maybe_option(arg: str) -> bool:
            return len(arg) > 1 and arg[0] == "-"

        def negative_number(arg: str) -> bool:
            if not re.fullmatch(r"-(\d+|\d*\.\d+)(e[+-]?\d+)?", arg):
                return False
            return not any(
                o.short and re.fullmatch(r"-\d", o.short) for c in self.lineage() for o in c.options
            )

        i = 0
        group: str | None = None
        while i < len(args) or group is not None:
            if group is not None:
                arg, group = group, None
            else:
                arg = args[i]
                i += 1
            if arg == "--":
                if dest is unknown:
                    dest.append(arg)
                dest.extend(args[i:])
                break
            if maybe_option(arg):
                opt = self.find_option(arg)
                if opt is not None:
                    if opt.takes_value:
                        if i >= len(args):
                            self.error(f"error: option '{opt.flags}' argument missing")
                        value = args[i]
                        i += 1
                        self.assign(opt, value)
                    else:
                        self.assign(opt, None)
                    continue
            if len(arg) > 2 and arg[0] == "-" and arg[1] != "-":
                opt = self.find_option("-" + arg[1])
                if opt is not None:
                    if opt.takes_value:
                        self.assign(opt, arg[2:])
                    else:
                        self.assign(opt, None)
                        group = "-" + arg[2:]
                    continue
            if re.match(r"--[^=]+=", arg):
                index = arg.index("=")
                opt = self.find_option(arg[:index])
                if opt is not None and opt.takes_value:
                    self.assign(opt, arg[index + 1 :])
                    continue
            if (
                dest is operands
                and maybe_option(arg)
                and not (not self.commands and negative_number(arg))
            ):
                dest = unknown
            dest.append(arg)
        return operands, unknown

    def parse_command(self, operands: list[str], unknown: list[str]) -> int:
        more, unknown = self.parse_options(unknown)
        operands = operands + more
        self.args = operands + unknown
        if self.stub:
            err(f"fake_jazz: `jazz {self.name}` is not emulated (only `jazz run` is)\n")
            return 1
        if operands and self.find_command(operands[0]):
            return self.dispatch(operands[0], operands[1:], unknown)
        if self.has_help_command() and operands and operands[0] == "help":
            return self.dispatch_help(operands[1] if len(operands) > 1 else None)
        if self.commands and not self.args and self.action is None:
            self.help(error=True)
        if any(HELP_OPTION.matches(arg) for arg in unknown):
            self.help()
        for cmd in self.lineage():
            for opt in cmd.options:
                if opt.mandatory and cmd.values.get(opt.attr) is None:
                    self.error(f"error: required option '{opt.flags}' not specified")
        if self.action is not None:
            self.check_unknown(unknown)
            if len(self.args) > len(self.arg_names):
                s = "" if len(self.arg_names) == 1 else "s"
                self.error(
                    f"error: too many arguments for '{self.name}'. Expected"
                    f" {len(self.arg_names)} argument{s} but got {len(self.args)}:"
                    f" {', '.join(self.args)}."
                )
            return self.action(self)
        if operands:
            if self.commands:
                self.unknown_command()
            self.check_unknown(unknown)
            return 0
        self.check_unknown(unknown)
        self.help(error=True)
        return 1

    def dispatch(self, name: str, operands: list[str], unknown: list[str]) -> int:
        sub = self.find_command(name)
        if sub is None:
            self.help(error=True)
        return sub.parse_command(operands, unknown)

    def dispatch_help(self, name: str | None) -> int:
        if name is None:
            self.help()
        sub = self.find_command(name)
        if sub is not None and not sub.stub:
            sub.help()
        return self.dispatch(name, [], ["--help"])

    def check_unknown(self, unknown: list[str]) -> None:
        if not unknown:
            return
        flag = unknown[0]
        suggestion = ""
        if flag.startswith("--"):
            candidates = []
            for cmd in self.lineage():
                candidates += [o.long for o in cmd.visible_options() if o.long]
            suggestion = suggest_similar(flag, candidates)
        self.error(f"error: unknown option '{flag}'{suggestion}")

    def unknown_command(self) -> None:
        name = self.args[0]
        candidates = []
        for cmd in self.visible_commands():
            candidates.append(cmd.name)
            if cmd.aliases:
                candidates.append(cmd.aliases[0])
        self.error(f"error: unknown command '{name}'{suggest_similar(name, candidates)}")

    # -- help ------------------------------------------------------------------------------

    def visible_options(self) -> list[Opt]:
        return [*self.options, HELP_OPTION]

    def visible_commands(self) -> list[Cmd]:
        cmds = list(self.commands)
        if self.has_help_command():
            cmds.append(Cmd("help", "display help for command", args=("[command]",)))
        return cmds

    def usage(self) -> str:
        parts = ["[options]"]
        if self.commands:
            parts.append("[command]")
        parts += list(self.arg_names)
        return " ".join(parts)

    def term(self) -> str:
        text = self.name + (f"|{self.aliases[0]}" if self.aliases else "")
        if self.options:
            text += " [options]"
        if self.arg_names:
            text += " " + " ".join(self.arg_names)
        return text

    def help(self, error: bool = False) -> None:
        fd = 2 if error else 1
        width = shutil.get_terminal_size().columns if os.isatty(fd) else 80
        _write(fd, format_help(self, width))
        raise CliExit(1 if error else 0)


def edit_distance(a: str, b: str) -> int:
    if abs(len(a) - len(b)) > 3:
        return max(len(a), len(b))
    d = [[i] + [0] * len(b) for i in range(len(a) + 1)]
    for j in range(len(b) + 1):
        d[0][j] = j
    for j in range(1, len(b) + 1):
        for i in range(1, len(a) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


def suggest_similar(word: str, candidates: list[str]) -> str:
    candidates = list(dict.fromkeys(candidates))
    options = word.startswith("--")
    if options:
        word = word[2:]
        candidates = [c[2:] for c in candidates]
    similar: list[str] = []
    best = 3
    for candidate in candidates:
        if len(candidate) <= 1:
            continue
        distance = edit_distance(word, candidate)
        length = max(len(word), len(candidate))
        if (length - distance) / length > 0.4:
            if distance < best:
                best, similar = distance, [candidate]
            elif distance == best:
                similar.append(candidate)
    similar.sort()
    if options:
        similar = ["--" + c for c in similar]
    if len(similar) > 1:
        return f"\n(Did you mean one of {', '.join(similar)}?)"
    if similar:
        return f"\n(Did you mean {similar[0]}?)"
    return ""


def box_wrap(text: str, width: int) -> str:
    if width < 40:
        return text
    lines = []
    for raw in re.split(r"\r\n|\n", text):
        chunks = re.findall(r"\s*\S+", raw)
        if not chunks:
            lines.append("")
            continue
        current = [chunks.pop(0)]
        size = len(current[0])
        for chunk in chunks:
            if size + len(chunk) <= width:
                current.append(chunk)
                size += len(chunk)
                continue
            lines.append("".join(current))
            current = [chunk.lstrip()]
            size = len(current[0])
        lines.append("".join(current))
    return "\n".join(lines)


def format_help(cmd: Cmd, width: int) -> str:
    options = cmd.visible_options()
    commands = cmd.visible_commands()
    term_width = max([len(o.flags) for o in options] + [len(c.term()) for c in commands])

    def item(term: str, description: str) -> str:
        if not description:
            return "  " + term
        remaining = width - term_width - 4
        if remaining >= 40 and not re.search(r"\n[^\S\r\n]", description):
            description = box_wrap(description, remaining).replace(
                "\n", "\n" + " " * (term_width + 2)
            )
        return "  " + term.ljust(term_width) + "  " + description.replace("\n", "\n  ")

    names = " ".join(c.name for c in reversed(cmd.lineage()))
    lines = [f"Usage: {names} {cmd.usage()}", ""]
    if cmd.description:
        lines += [box_wrap(cmd.description, width), ""]
    lines += ["Options:", *(item(o.flags, o.description) for o in options), ""]
    if commands:
        lines += ["Commands:", *(item(c.term(), c.description) for c in commands), ""]
    return "\n".join(lines)


def build_program(run_action: Callable[[Cmd], int]) -> Cmd:
    program = Cmd(
        "jazz",
        "Create and manage autonomous AI agents that execute real-world tasks (email, git,"
        " web, shell, and more)",
        version=VERSION,
        options=(
            Opt("-v, --verbose", "Enable verbose logging"),
            Opt("--debug", "Enable debug level logging"),
            Opt("--config <path>", "Path to configuration file"),
            Opt(
                "--no-tui",
                "Disable TUI; use plain terminal output (for CI, scripts, small terminals)",
            ),
            Opt(
                "--output <mode>",
                "Output mode: rendered, hybrid (default), raw (no formatting), or quiet"
                " (suppress output)",
            ),
        ),
    )
    program.add(
        Cmd(
            "run",
            "Run an agent once non-interactively (for scripts/webhooks). Prompt comes from the"
            " argument or piped stdin; the answer goes to stdout, all chatter to stderr.",
            args=("[prompt]",),
            action=run_action,
            options=(
                Opt("--agent <agentId>", "Agent ID or name to run", mandatory=True),
                Opt(
                    "--json",
                    "Emit a single JSON envelope { ok, answer, costUSD, tokenUsage, toolCalls }",
                ),
                Opt(
                    "--approval-policy <policy>",
                    "Auto-approve tools up to a risk level: read-only | low-risk | high-risk"
                    " (high-risk approves everything). Tools above the level are declined.",
                ),
                Opt(
                    "--auto-approve-tools <names>",
                    "Comma-separated tool names to auto-approve without prompting, regardless"
                    " of --approval-policy (e.g. execute_command). Narrower than raising the"
                    " whole policy tier.",
                ),
                Opt(
                    "--timezone <iana-tz>",
                    "IANA timezone (e.g. Europe/Paris) used to resolve relative/clock times for"
                    " this run, e.g. the add_reminder tool. Defaults to UTC.",
                ),
                Opt(
                    "--timeout <ms>",
                    "Abort the run after this many milliseconds",
                    parse=positive_int("--timeout"),
                ),
                Opt(
                    "--max-iterations <n>",
                    "Maximum agent reasoning iterations for this run",
                    parse=positive_int("--max-iterations"),
                ),
                Opt(
                    "--events <categories>",
                    "Emit selected event categories as NDJSON to stderr during the run"
                    " (comma-separated: tools,reasoning,text,usage,approval,subagent,all)."
                    " stdout stays the clean payload.",
                ),
                Opt(
                    "--reasoning <effort>",
                    "Reasoning effort for this run: low | medium | high | disable (overrides"
                    " the agent's config)",
                ),
                Opt(
                    "--conversation <id>",
                    "Stable conversation key (e.g. a Telegram chat id). Loads prior history for"
                    " this key before the run and saves the updated transcript after, giving"
                    " repeated invocations shared memory. Omit for a stateless one-shot run.",
                ),
                Opt(
                    "--stream",
                    "Force streaming mode. Required for --events to emit in non-TTY contexts"
                    " (scripts, webhooks), where streaming is otherwise auto-disabled.",
                ),
                Opt("--no-stream", "Disable streaming mode"),
                Opt(
                    "--ephemeral",
                    "Skip persistence entirely: --conversation is ignored (no history"
                    " load/save) and long-term memory writes are withheld. Nothing about this"
                    " run touches disk.",
                ),
                Opt(
                    "--history-json <json>",
                    "Inline JSON array of prior ChatMessages, used only with --ephemeral in"
                    " place of --conversation — pass back the `messages` field from a previous"
                    " --ephemeral --json response to keep multi-turn context without"
                    " persistence.",
                ),
            ),
        )
    )
    for name, description, aliases, options in (
        ("agent", "Manage agents", (), ()),
        ("persona", "Manage personas", (), ()),
        ("config", "Manage configuration", (), ()),
        ("mcp", "Manage MCP servers", (), ()),
        (
            "update",
            "Update Jazz to the latest version",
            ("upgrade",),
            (Opt("--check", "Check for updates without installing"),),
        ),
        ("workflow", "Manage and run workflows", (), ()),
    ):
        program.add(Cmd(name, description, aliases=aliases, options=options, stub=True))
    return program


# -- the run ------------------------------------------------------------------------------------

EVENT_CATEGORY_TYPES = {
    "tools": ["tools_detected", "tool_call", "tool_execution_start", "tool_execution_complete"],
    "reasoning": ["thinking_start", "thinking_chunk", "thinking_complete"],
    "text": ["text_start", "text_chunk"],
    "usage": ["stream_start", "usage_update", "complete"],
    "approval": ["approval_required", "approval_resolved"],
    "subagent": ["subagent_start", "subagent_complete"],
}
STREAM_ONLY = {"tool_call", "text_start", "text_chunk", "stream_start", "usage_update", "complete"}
POLICIES = ("read-only", "low-risk", "high-risk")
REASONING = ("disable", "low", "medium", "high")
HEADLESS_DECLINE = (
    'The "{tool}" tool requires approval and was automatically declined because this is a'
    " non-interactive run. Do not ask the user to approve or retry — there is no one to"
    " respond. Either accomplish the task using tools that do not require approval, or clearly"
    " explain what could not be done and why."
)
USER_REJECTED = (
    "User rejected the operation. Please acknowledge this and ask if they'd like to try"
    " something different."
)
FAIL500_TRACE = """\
370 | `);continue}}let c=`; filename="${{NBt(s.filename??"blob")}}"`,I=(s.mediaType??"application/octet-stream").replace(/[\\r\\n]/g,"");if(yield n.encode(`${{l}}${{c}}\\r
375 | `)}}return{{stream:ef(i()),async dispose(s){{if(r)return;r=!0;let l=a;if(l!=null)await l.cancel(s).catch(()=>{{}})}}}}

AI_APICallError: fake upstream exploded
      cause: undefined,
        url: "{url}",
 requestBodyValues: {{
  model: "{model}",
  messages: [Array ...],
  tools: [Array ...],
  tool_choice: "auto",
  stream: {stream},
}},
 statusCode: 500,
 responseHeaders: {{
  "content-length": "72",
  "content-type": "application/json",
}},
 responseBody: "{{\\"error\\": {{\\"message\\": \\"fake upstream exploded\\", \\"type\\": \\"server_error\\"}}}}",
 isRetryable: true,
       data: {{
  error: [Object ...],
}},
 vercel.ai.error: true,
 vercel.ai.error.AI_APICallError: true,

      at <anonymous> ({bundle}:375:22456)
      at async <anonymous> ({bundle}:375:21051)
      at async doStream ({bundle}:7797:10332)

"""  # noqa: E501 - the recorded line is that long
CRASH_TRACE = f"""\
375 | `)}}return{{stream:ef(i()),async dispose(s){{if(r)return;r=!0;let l=a;if(l!=null)
                                                              ^
TypeError: undefined is not an object (evaluating 'l.cancel')
      at <anonymous> ({BUNDLE}:375:22456)
      at async <anonymous> ({BUNDLE}:411:51988)

"""
PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cfc0f01f0005050201a5b4e3e70000000049454e44ae426082"
)


class Failure(Exception):
    """A failure envelope (failOneShot)."""


class Interrupted(Exception):
    """The run's fiber was interrupted by SIGTERM/SIGINT."""


class StdinReader:
    """process.stdin with a 'data' listener: reads on a thread until EOF."""

    def __init__(self) -> None:
        self.started = False
        self.eof = threading.Event()
        self.data = bytearray()
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.failed = False

    def start(self) -> None:
        if not self.started:
            self.started = True
            threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        pending = b""
        try:
            while chunk := os.read(0, 65536):
                self.data += chunk
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    self.lines.put(line)
        except OSError:
            self.failed = True
        finally:
            self.eof.set()

    def keeps_process_alive(self) -> bool:
        return self.started and not self.eof.is_set()


def file_modes(home: str) -> tuple[int, int]:
    """(file, dir) modes: private, or group-readable in a setgid home."""
    try:
        shared = os.stat(home).st_mode & stat.S_ISGID
    except OSError:
        shared = 0
    return (0o640, 0o2750) if shared else (0o600, 0o700)


class Run:
    def __init__(self, program: Cmd, cmd: Cmd) -> None:
        self.program, self.cmd = program, cmd
        self.opts = cmd.values
        self.json = self.opts.get("json") is True
        self.types: set[str] = set()
        self.stdin = StdinReader()
        self.signals = 0
        self.shutdown = False
        self.deadline: float | None = None
        self.started = False
        self.turns: int | None = None
        self.home = jazz_home()
        self.config: dict = {}
        self.streaming = False
        self.agent: dict = {}

    # -- plumbing ----------------------------------------------------------------------------

    def fail_early(self, message: str) -> int:
        if self.json:
            out(js_json({"ok": False, "error": message, "costUSD": 0}) + "\n")
        else:
            err(message + "\n")
        return 1

    def emit(self, event: dict) -> None:
        if event["type"] in self.types and (self.streaming or event["type"] not in STREAM_ONLY):
            err(js_json(cut_all(event)) + "\n")

    def on_signal(self, signum: int, _frame: object) -> None:
        self.signals += 1
        if self.signals == 1:
            label = "Ctrl+C" if signum == signal.SIGINT else "SIGTERM"
            out(f"\nReceived {label}. Shutting down...\n")
            self.shutdown = True
            return
        out("\nForce exiting immediately. Some cleanup may be skipped.\n")
        self.log_end()
        os._exit(1)

    def wait(self, cond: Callable[[], bool], limit: float | None, timed: bool = True) -> bool:
        """Poll ``cond``; SIGTERM interrupts, the run's --timeout fails (when ``timed``)."""
        end = None if limit is None else time.monotonic() + limit
        while True:
            if self.shutdown:
                raise Interrupted
            if cond():
                return True
            now = time.monotonic()
            if timed and self.deadline is not None and now >= self.deadline:
                raise Failure(f"Run exceeded the {self.opts['timeout']}ms timeout.")
            if end is not None and now >= end:
                return False
            time.sleep(0.01)

    def step(self) -> None:
        self.wait(lambda: True, None)

    def log_end(self) -> None:
        if self.started:
            self.started = False
            log(
                {
                    "event": "end",
                    "pid": os.getpid(),
                    "conversation": self.opts.get("conversation"),
                    "t": time.monotonic(),
                }
            )

    # -- the command ------------------------------------------------------------------------

    def main(self) -> int:
        policy = self.opts.get("approvalPolicy")
        if policy is not None and policy not in POLICIES:
            return self.fail_early(
                f'Invalid --approval-policy "{policy}". Expected read-only, low-risk, or high-risk.'
            )
        if self.opts.get("events") is not None:
            self.types = {"error"}
            for category in self.opts["events"].split(","):
                category = category.strip().lower()
                if not category:
                    continue
                if category == "all":
                    self.types.update(t for ts in EVENT_CATEGORY_TYPES.values() for t in ts)
                elif category in EVENT_CATEGORY_TYPES:
                    self.types.update(EVENT_CATEGORY_TYPES[category])
                else:
                    return self.fail_early(
                        f'Invalid --events category "{category}". Expected: tools, reasoning,'
                        " text, usage, approval, subagent, all."
                    )
        reasoning = self.opts.get("reasoning")
        if reasoning is not None and reasoning not in REASONING:
            return self.fail_early(
                f'Invalid --reasoning "{reasoning}". Expected low, medium, high, or disable.'
            )
        tz = self.opts.get("timezone")
        if tz is not None and not valid_timezone(tz):
            return self.fail_early(
                f'Invalid --timezone "{tz}". Expected an IANA timezone name (e.g. Europe/Paris).'
            )
        os.environ["JAZZ_NO_TUI"] = "1"
        previous = {s: signal.signal(s, self.on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        code = 0
        try:
            try:
                code = self.run_once()
            except Interrupted:
                # The in-flight step (a model call) finishes before the fiber ends.
                term_s = float(os.environ.get("FAKE_JAZZ_TERM_S", "0.2") or 0)
                time.sleep(max(term_s, 0))
                code = 0
            except CliExit as exc:
                code = exc.code
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            # A 'data' listener on an open stdin keeps the event loop (the process) alive.
            while self.stdin.keeps_process_alive():
                self.stdin.eof.wait(0.1)
        finally:
            self.log_end()
        return code

    def run_once(self) -> int:
        agent_id = self.opts["agent"].strip()
        if not agent_id:
            return self.fail_early("No agent specified. Use --agent <agentId>.")
        prompt = self.cmd.args[0] if self.cmd.args else ""
        if not prompt.strip() and not os.isatty(0):
            self.stdin.start()
            self.wait(self.stdin.eof.is_set, None, timed=False)
            prompt = "" if self.stdin.failed else self.stdin.data.decode("utf-8", "replace")
        self.log_start(prompt, agent_id)
        try:
            return self.run_agent(prompt, agent_id)
        except Failure as exc:
            return self.fail_early(str(exc))

    def log_start(self, prompt: str, agent_id: str) -> None:
        mask = os.umask(0)
        os.umask(mask)
        self.turns = self.peek_turns(agent_id)
        self.started = True
        log(
            {
                "event": "start",
                "pid": os.getpid(),
                "argv": sys.argv,
                "uid": os.getuid(),
                "gid": os.getgid(),
                "groups": os.getgroups(),
                "umask": mask,
                "conversation": self.opts.get("conversation"),
                "prompt": prompt,
                "t": time.monotonic(),
                "env": sorted(os.environ),
                "home": os.environ.get("JAZZ_HOME"),
                "turns": self.turns,
            }
        )

    # -- storage ------------------------------------------------------------------------------

    def config_path(self) -> str:
        given = self.program.values.get("config") or os.environ.get("JAZZ_CONFIG_PATH")
        return os.path.expanduser(given) if given else os.path.join(self.home, "config.json")

    def load_config(self) -> dict | None:
        for path in (self.config_path(), os.path.join(os.getcwd(), ".jazz", "config.json")):
            try:
                with open(path, encoding="utf-8") as fh:
                    data = json.load(fh)
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                return data
        return None

    def agents_dir(self, config: dict | None) -> str:
        storage = (config or {}).get("storage") or {}
        path = storage.get("path") if storage.get("type", "file") == "file" else None
        base = path.strip() if isinstance(path, str) and path.strip() else self.home
        return os.path.join(base, "agents")

    def find_agent(self, identifier: str, config: dict | None, create: bool) -> dict | None:
        directory = self.agents_dir(config)
        path = os.path.join(directory, f"{identifier}.json")
        try:
            with open(path, encoding="utf-8") as fh:
                content = fh.read()
        except FileNotFoundError:
            content = None
        except OSError as exc:
            raise Failure(
                f'Storage operation "read" failed on "{path}": Failed to read file: {exc}'
            ) from exc
        if content is not None:
            try:
                agent = json.loads(content)
            except ValueError as exc:
                raise Failure(
                    f'Storage operation "read" failed on "{path}": Invalid JSON format: {exc}'
                ) from exc
            return agent if isinstance(agent, dict) else {}
        if create:  # listAgents() makes the directory it lists
            self.make_dirs(directory)
        try:
            names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
        except OSError:
            return None
        for name in names:
            try:
                with open(os.path.join(directory, name), encoding="utf-8") as fh:
                    agent = json.load(fh)
            except (OSError, ValueError):
                continue
            if isinstance(agent, dict) and agent.get("name") == identifier:
                return agent
        return None

    def history_path(self, agent_id: str) -> str:
        return os.path.join(self.home, "history", f"{agent_id}.json")

    def load_history(self, agent_id: str) -> dict:
        try:
            with open(self.history_path(agent_id), encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return {"agentId": agent_id, "conversations": []}
        if not isinstance(data, dict) or not isinstance(data.get("conversations"), list):
            return {"agentId": agent_id, "conversations": []}
        return data

    def load_conversation(self, agent_id: str, key: str) -> dict | None:
        conversations = self.load_history(agent_id)["conversations"]
        return next((c for c in conversations if c.get("conversationId") == key), None)

    def inline_history(self) -> list | None:
        if self.opts.get("ephemeral") is not True or self.opts.get("historyJson") is None:
            return None
        try:
            parsed = json.loads(self.opts["historyJson"])
        except ValueError:
            return None
        return parsed if isinstance(parsed, list) else None

    def conversation_key(self) -> str | None:
        if self.opts.get("ephemeral") is True or self.opts.get("conversation") is None:
            return None
        return self.opts["conversation"].strip()

    def peek_turns(self, agent_id: str) -> int | None:
        """User turns this run's model sees, its own included (the recordings' count)."""
        try:
            inline = self.inline_history()
            if inline is not None:
                prior = inline
            else:
                key = self.conversation_key()
                if not key:
                    return 1
                agent = self.find_agent(agent_id, self.load_config(), create=False)
                if agent is None:
                    return None
                record = self.load_conversation(str(agent.get("id", agent_id)), key)
                prior = (record or {}).get("messages") or []
            return 1 + sum(1 for m in prior if isinstance(m, dict) and m.get("role") == "user")
        except Failure:
            return None

    def make_dirs(self, path: str) -> None:
        _, dir_mode = file_modes(self.home)
        missing = []
        while path and not os.path.isdir(path):
            missing.append(path)
            path = os.path.dirname(path)
        for directory in reversed(missing):
            try:
                os.mkdir(directory, 0o700)
            except FileExistsError:
                continue
            os.chmod(directory, dir_mode)

    def write_file(self, path: str, data: bytes) -> None:
        file_mode, _ = file_modes(self.home)
        self.make_dirs(os.path.dirname(path))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, file_mode)
            os.write(fd, data)
        finally:
            os.close(fd)

    def save_conversation(self, record: dict, agent_id: str) -> None:
        directory = os.path.join(self.home, "history")
        self.make_dirs(directory)
        lock = os.path.join(directory, f"{agent_id}.lock")
        for _ in range(500):
            try:
                os.mkdir(lock, 0o700)
                break
            except FileExistsError:
                if time.time() - os.stat(lock).st_mtime > 30:
                    shutil.rmtree(lock, ignore_errors=True)
                time.sleep(0.01)
        else:
            raise OSError(f"Failed to acquire lock at {lock} after retries")
        try:
            history = self.load_history(agent_id)
            others = [
                c
                for c in history["conversations"]
                if c.get("conversationId") != record["conversationId"]
            ]
            conversations = [record, *others][:MAX_CONVERSATION_HISTORY_PER_AGENT]
            text = json.dumps(
                {"agentId": agent_id, "conversations": conversations}, ensure_ascii=False, indent=2
            )
            tmp = os.path.join(
                directory, f".history-{int(time.time() * 1000)}-{secrets.token_hex(4)}.tmp"
            )
            self.write_file(tmp, text.encode("utf-8", "surrogatepass"))
            os.replace(tmp, self.history_path(agent_id))
        finally:
            shutil.rmtree(lock, ignore_errors=True)

    # -- the agent run ----------------------------------------------------------------------

    def run_agent(self, prompt: str, agent_id: str) -> int:
        if not prompt.strip():
            raise Failure("No prompt provided. Pass it as an argument or pipe it via stdin.")
        config = self.load_config()
        agent = self.find_agent(agent_id, config, create=True)
        if agent is None or config is None:  # a home needs both (docs/runner-contract.md)
            raise Failure(f"No agent found with ID: {agent_id}")
        self.config = config
        self.agent = agent
        real_id = str(agent.get("id") or agent_id)
        key = self.conversation_key()
        if key is not None and not key:
            raise Failure("Invalid --conversation id: must be non-empty.")
        prior = self.load_conversation(real_id, key) if key is not None else None
        inline = self.inline_history()
        self.streaming = self.stream_enabled()
        if self.opts.get("timeout") is not None:
            self.deadline = time.monotonic() + self.opts["timeout"] / 1000
        result = self.agent_loop(prompt)
        self.deadline = None
        history = inline if inline is not None else (prior or {}).get("messages") or []
        messages = [
            *history,
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": result["answer"]},
        ]
        if key is not None:
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
            record = {
                "conversationId": key,
                "title": (prior or {}).get("title") or prompt.strip()[:80],
                "agentId": real_id,
                "startedAt": (prior or {}).get("startedAt") or now,
                "endedAt": now,
                "messageCount": len(messages),
                "messages": messages,
            }
            try:
                self.save_conversation(record, real_id)
            except OSError as exc:
                err(f'Warning: failed to save conversation "{key}": {exc}\n')
        prompt_tokens, completion_tokens = result["usage"]
        if not self.json:
            out(result["answer"].strip() + "\n")
            return 0
        envelope: dict[str, Any] = {
            "ok": True,
            "answer": result["answer"],
            "costUSD": result.get("cost", 0),
            "tokenUsage": {
                "promptTokens": prompt_tokens,
                "completionTokens": completion_tokens,
                "totalTokens": prompt_tokens + completion_tokens,
            },
            "toolCalls": [
                {
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"],
                }
                for c in result["calls"]
            ],
        }
        if result.get("webApp"):
            envelope["webApp"] = result["webApp"]
        if self.opts.get("ephemeral") is True:
            envelope["messages"] = messages
        out(js_json(envelope) + "\n")
        return 0

    def stream_enabled(self) -> bool:
        if self.opts.get("stream") is True:
            return True
        configured = ((self.config.get("output") or {}).get("streaming") or {}).get("enabled")
        if isinstance(configured, bool):
            return configured
        if os.environ.get("CI") in ("true", "1") or os.environ.get("NO_COLOR") in ("true", "1"):
            return False
        return os.isatty(1)

    def agent_config(self) -> dict:
        config = self.agent.get("config")
        return config if isinstance(config, dict) else {}

    def provider(self) -> str:
        return str(self.agent_config().get("llmProvider") or "llamacpp")

    def model(self) -> str:
        return str(self.agent_config().get("llmModel") or "fake-model")

    def agent_name(self) -> str:
        return str(self.agent.get("name") or self.agent.get("id") or self.opts["agent"].strip())

    def present_warning(self) -> None:
        provider = self.provider()
        config = self.agent_config()
        if provider not in LOCAL_SERVER_PROVIDERS:
            return
        pinned = config.get("numCtx")
        if isinstance(pinned, int | float) and pinned > 0:
            return
        ceiling = config.get("maxContextTokens")
        if isinstance(ceiling, int | float) and 0 < ceiling < DEFAULT_CONTEXT_WINDOW:
            assumed = f"this agent's max context ({int(ceiling):,} tokens)"
        else:
            assumed = (
                f"a {DEFAULT_CONTEXT_WINDOW:,}-token estimate, since nothing reports this"
                " model's size"
            )
        message = (
            f"No context window is pinned for this {provider} agent, so Jazz is compacting"
            f" against {assumed}. If the server runs a smaller window it will truncate the"
            " conversation instead. Pin one with `jazz agent edit` → Context Window."
        )
        if self.types:
            err(
                js_json(
                    cut_all({"type": "warning", "agentName": self.agent_name(), "message": message})
                )
                + "\n"
            )
        else:
            err(f"⚠ {self.agent_name()}: {message}\n")

    def llm_call(self, content: str, calls: list[dict], usage: tuple[int, int]) -> None:
        """One model call: what the stream processor emits for it (streaming only)."""
        self.step()
        started = int(time.time() * 1000)
        self.emit(
            {
                "type": "stream_start",
                "provider": self.provider(),
                "model": self.model(),
                "timestamp": started,
            }
        )
        if content:
            self.emit({"type": "text_start"})
            pieces = [content[:-1], content[-1:]] if len(content) > 1 else [content]
            accumulated = ""
            for sequence, piece in enumerate(pieces):
                accumulated += piece
                self.emit(
                    {
                        "type": "text_chunk",
                        "delta": piece,
                        "accumulated": accumulated,
                        "sequence": sequence,
                    }
                )
        for sequence, call in enumerate(calls):
            self.emit({"type": "tool_call", "toolCall": call, "sequence": sequence})
        total = usage[0] + usage[1]
        counts = {
            "promptTokens": usage[0],
            "completionTokens": usage[1],
            "totalTokens": total,
            "reasoningTokens": 0,
            "cacheReadTokens": 0,
        }
        self.emit({"type": "usage_update", "usage": counts})
        response: dict[str, Any] = {"id": "", "model": self.model(), "content": content}
        if calls:
            response["toolCalls"] = calls
        response.update(usage=counts, toolDefinitionChars=13497, toolDefinitionCount=16)
        duration = max(1, int(time.time() * 1000) - started)
        metrics: dict[str, Any] = {"firstTokenLatencyMs": duration}
        if content:
            metrics["firstTextLatencyMs"] = duration
        metrics.update(tokensPerSecond=js_number(total / duration * 1000), totalTokens=total)
        self.emit(
            {
                "type": "complete",
                "response": response,
                "totalDurationMs": duration,
                "metrics": metrics,
            }
        )
        self.step()

    def tool(self, call: dict, args: dict, result: Any) -> None:
        """A tool that needs no approval: detected, started, completed."""
        name = call["function"]["name"]
        self.emit(
            {
                "type": "tools_detected",
                "toolNames": [name],
                "toolsRequiringApproval": [],
                "agentName": self.agent_name(),
            }
        )
        self.emit(
            {
                "type": "tool_execution_start",
                "toolName": name,
                "toolCallId": call["id"],
                "arguments": args,
            }
        )
        self.emit(
            {
                "type": "tool_execution_complete",
                "toolCallId": call["id"],
                "result": js_json(result),
                "durationMs": 3,
                "success": True,
            }
        )

    def agent_loop(self, prompt: str) -> dict:
        self.present_warning()
        words = prompt.split()
        conv = self.opts.get("conversation")
        if "hold" in words:
            index = words.index("hold")
            name = words[index + 1] if index + 1 < len(words) else ""
            release = os.path.join(FAKE_DIR, f"release-{name}")
            self.wait(lambda: os.path.exists(release), 60)
        if "readprocs" in words:  # what another conversation's agent could read of runs
            log({"event": "procs", "cmdlines": readable_cmdlines(), "conversation": conv})
        if "crash" in words:
            err(CRASH_TRACE)
            raise CliExit(1)
        if "garbage" in words:
            out("this is not json at all\n")
            raise CliExit(1)
        if "noenvelope" in words:
            raise CliExit(0)
        if "hang" in words:
            self.wait(lambda: False, 120, timed=False)
        if "spawn" in words:
            child = subprocess.Popen(["sleep", "300"])
            grand = subprocess.Popen(["setsid", "sleep", "300"])
            log({"event": "spawned", "pids": [child.pid, grand.pid], "conversation": conv})
            self.wait(lambda: False, 120, timed=False)
        if "fail500" in words:
            self.emit(
                {
                    "type": "stream_start",
                    "provider": self.provider(),
                    "model": self.model(),
                    "timestamp": int(time.time() * 1000),
                }
            )
            err(
                FAIL500_TRACE.format(
                    url=self.provider_url() + "/v1/chat/completions",
                    model=self.model(),
                    stream="true" if self.streaming else "false",
                    bundle=BUNDLE,
                )
            )
            raise Failure("Server error (500): fake upstream exploded")
        if "artifact-outside" in words:
            result = self.web_app(
                "made a file", {"htmlPath": "/etc/hosts", "imagePath": "/etc/passwd"}
            )
        elif "approve" in words:
            result = self.approval_run()
        elif "askuser" in words or "asklong" in words:
            result = self.ask_user(LONG_QUESTION if "asklong" in words else "Which colour?")
        elif "webapp" in words:
            result = self.web_app("Here is the web app: Fake chart", None)
        else:
            turns = self.turns or 1
            args = {"path": "notes.md"}
            read = {
                "path": os.path.join(os.getcwd(), "notes.md"),
                "encoding": "utf-8",
                "content": "",
                "truncated": False,
                "totalLines": 0,
                "returnedLines": 0,
            }
            base = 100 + 20 * turns
            call = tool_call("call_fake_read", "read", args)
            self.llm_call("", [call], (base, 12))
            self.tool(call, args, read)
            answer = f"fake answer to: {prompt}"
            completion = len(answer.split()) + 2
            self.llm_call(answer, [], (base + 20, completion))
            result = {"answer": answer, "calls": [call], "usage": (2 * base + 20, 12 + completion)}
        if "costly" in words:
            result["cost"] = 0.25
        return result

    def provider_url(self) -> str:
        provider = self.provider()
        llm = (self.config.get("llm") or {}).get(provider) or {}
        url = llm.get("base_url") or llm.get("baseUrl") or LOCAL_SERVER_PROVIDERS.get(provider)
        return str(url or "https://api.example.invalid").rstrip("/")

    def approval_run(self) -> dict:
        name = "execute_command"
        args = {
            "command": "echo hello-from-tool > tool-out.txt; echo hello-from-tool",
            "description": "write a marker file and say hello",
        }
        call = tool_call("call_fake_1", name, args)
        self.llm_call("", [call], (130, 18))
        self.emit(
            {
                "type": "tools_detected",
                "toolNames": [name],
                "toolsRequiringApproval": [name],
                "agentName": self.agent_name(),
            }
        )
        cwd = os.getcwd()
        message = (
            f"Command: {args['command']}\nDescription: {args['description']}\n"
            f"Working Directory: {cwd}\nTimeout: 900000ms\n\n"
            "This command will be executed on your system. Only approve commands you trust."
        )
        policy = self.opts.get("approvalPolicy")
        auto_tools = [
            t.strip() for t in (self.opts.get("autoApproveTools") or "").split(",") if t.strip()
        ]
        auto = policy == "high-risk" or name in auto_tools
        required: dict[str, Any] = {
            "type": "approval_required",
            "toolCallId": call["id"],
            "toolName": name,
            "message": message,
            "riskLevel": "high-risk",
        }
        if policy is not None:
            required["autoApprovePolicy"] = policy
        self.emit(required)
        rejection = USER_REJECTED
        if auto:
            approved = True
        elif not self.types:
            approved, rejection = False, HEADLESS_DECLINE.format(tool=name)
        else:
            approved = self.await_decision(call["id"])
        self.emit(
            {
                "type": "approval_resolved",
                "toolCallId": call["id"],
                "toolName": name,
                "approved": approved,
                "auto": auto,
            }
        )
        if approved:
            self.emit(
                {
                    "type": "tool_execution_start",
                    "toolName": name,
                    "toolCallId": call["id"],
                    "arguments": args,
                }
            )
            outcome = {
                "command": args["command"],
                "workingDirectory": cwd,
                "exitCode": 0,
                "stdout": "hello-from-tool",
                "stderr": "",
                "success": True,
            }
            self.emit(
                {
                    "type": "tool_execution_complete",
                    "toolCallId": call["id"],
                    "result": js_json(outcome),
                    "durationMs": 16,
                    "success": True,
                }
            )
        else:
            self.emit(
                {
                    "type": "tool_execution_complete",
                    "toolCallId": call["id"],
                    "result": js_json({"rejected": True, "message": rejection}),
                    "durationMs": 0,
                    "success": False,
                    "error": "User rejected the operation",
                }
            )
        answer = f"the tool was {'approved' if approved else 'rejected'}"
        self.llm_call(answer, [], (130, 10))
        return {"answer": answer, "calls": [call], "usage": (260, 28)}

    def await_decision(self, tool_call_id: str) -> bool:
        """OneShotPresentationService.requestApproval: approval_decision lines on stdin."""
        if self.stdin.started:  # the prompt listener already drained stdin to its end
            while not self.stdin.lines.empty():
                self.stdin.lines.get_nowait()
        self.stdin.start()
        decision: list[bool] = []

        def answered() -> bool:
            while not decision:
                try:
                    raw = self.stdin.lines.get_nowait()
                except queue.Empty:
                    return False
                line = raw.decode("utf-8", "replace").strip()
                try:
                    parsed = json.loads(line) if line else None
                except ValueError:
                    continue
                if (
                    isinstance(parsed, dict)
                    and parsed.get("type") == "approval_decision"
                    and parsed.get("toolCallId") == tool_call_id
                    and isinstance(parsed.get("approved"), bool)
                ):
                    decision.append(parsed["approved"])
            return True

        self.wait(answered, None)
        return decision[0]

    def ask_user(self, question: str) -> dict:
        args = {
            "question": question,
            "suggested_responses": [
                {"value": "red", "label": "Red"},
                {"value": "blue", "label": "Blue"},
            ],
            "allow_multiple": False,
        }
        call = tool_call("call_fake_ask", "ask_user_question", args)
        self.llm_call("", [call], (130, 5))
        # requestUserInput() of the one-shot presentation returns "" at once.
        self.emit(
            {
                "type": "tools_detected",
                "toolNames": ["ask_user_question"],
                "toolsRequiringApproval": [],
                "agentName": self.agent_name(),
            }
        )
        self.emit(
            {
                "type": "tool_execution_start",
                "toolName": "ask_user_question",
                "toolCallId": call["id"],
                "arguments": args,
                "longRunning": True,
            }
        )
        self.emit(
            {
                "type": "tool_execution_complete",
                "toolCallId": call["id"],
                "result": js_json("User responded: "),
                "durationMs": 6,
                "success": True,
            }
        )
        answer = "User answered: 'User responded: '"
        self.llm_call(answer, [], (130, 4))
        return {"answer": answer, "calls": [call], "usage": (260, 9)}

    def web_app(self, answer: str, paths: dict | None) -> dict:
        alphabet = "23456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
        app_id = "".join(secrets.choice(alphabet) for _ in range(22))
        title = "Fake chart"
        html = f"<html><head><title>{title}</title></head><body><h1>{title}</h1></body></html>"
        args = {"html": html, "title": title, "mode": "static"}
        call = tool_call("call_fake_webapp", "create_web_app", args)
        self.llm_call("", [call], (180, 60))
        if paths is None:
            directory = os.path.join(self.home, "webapps")
            paths = {
                "htmlPath": os.path.join(directory, f"{app_id}.html"),
                "imagePath": os.path.join(directory, f"{app_id}.png"),
            }
            self.write_file(paths["htmlPath"], html.encode())
            self.write_file(paths["imagePath"], PNG_1X1)
        app = {"id": app_id, "mode": "static", "title": title, **paths}
        self.tool(call, args, app)
        self.llm_call(answer, [], (200, 10))
        return {"answer": answer, "calls": [call], "usage": (380, 70), "webApp": app}


def tool_call(call_id: str, name: str, args: dict) -> dict:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": js_json(args)},
    }


def jazz_home() -> str:
    given = (os.environ.get("JAZZ_HOME") or "").strip()
    if given:
        return os.path.abspath(os.path.expanduser(given))
    return os.path.join(os.path.expanduser("~"), ".jazz")


def valid_timezone(name: str) -> bool:
    """What Intl.DateTimeFormat accepts as timeZone, near enough."""
    if re.fullmatch(r"[+-](0\d|1\d|2[0-3])(:?[0-5]\d)?", name):
        return True
    if name.upper() in ("UTC", "GMT", "ETC/UTC", "ETC/GMT"):
        return True
    try:
        zoneinfo.ZoneInfo(name)
        return True
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        pass
    lowered = name.lower()
    return any(zone.lower() == lowered for zone in zoneinfo.available_timezones())


def main(argv: list[str]) -> int:
    startup = float(os.environ.get("FAKE_JAZZ_STARTUP_S", "0") or 0)
    if startup > 0:
        time.sleep(startup)  # Bun loading the bundle; signals have their default action
    program: Cmd

    def run_action(cmd: Cmd) -> int:
        return Run(program, cmd).main()

    program = build_program(run_action)
    if not argv:
        err("fake_jazz: the setup wizard (`jazz` without arguments) is not emulated\n")
        return 1
    try:
        return program.parse_command([], argv)
    except CliExit as exc:
        return exc.code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
