"""The command line of one ``jazz run --json``: where the prompt goes and which flags go with it.

The documented CLI takes every flag and the prompt as a JSON line on stdin; the released
one takes only the flags its ``--help`` lists (:mod:`.dialect`), and the prompt as its
last argument where no other conversation can read it, else on stdin, closed at once.
Kept apart from the backend (:mod:`.cli`) so what a run is told is read in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from .base import RunRequest
from .dialect import LONG_TIMEOUT_MS, MAX_ARGV_PROMPT_BYTES, CliProfile

# where a run's prompt goes: a JSON line on stdin (documented CLI), the last argument, or
# all of stdin, closed at once (released CLI)
PromptMode = Literal["json", "argv", "stdin"]


def prompt_mode(profile: CliProfile, argv_hidden: bool, request: RunRequest) -> PromptMode:
    """Where the prompt goes: ``json`` (documented: a JSON line on stdin), ``argv``
    (released, hidden from other conversations), ``stdin`` (released: raw, closed)."""
    if not profile.released:
        return "json"
    fits = len(request.prompt.encode("utf-8", "surrogatepass")) <= MAX_ARGV_PROMPT_BYTES
    return "argv" if argv_hidden and fits and "\0" not in request.prompt else "stdin"


def run_argv(
    command: Sequence[str], profile: CliProfile, request: RunRequest, mode: PromptMode = "json"
) -> list[str]:
    """``command``'s ``run`` in ``profile``'s dialect for ``request``."""
    if profile.released:
        return released_argv(command, profile, request, mode)
    return documented_argv(command, request)


def documented_argv(command: Sequence[str], request: RunRequest) -> list[str]:
    """The documented CLI's flags, all of them; the prompt comes on stdin."""
    return [
        *command,
        "run",
        "--json",
        "--no-tui",
        "--agent",
        request.agent,
        "--conversation",
        request.conversation,
        "--approval-policy",
        request.approval_policy,
        "--events",
        ",".join(request.events),
        "--interactive-stdin",
        "--input-stdin",
        "--timeout",
        str(int(request.timeout_s * 1000)),
    ]


def released_argv(
    command: Sequence[str], profile: CliProfile, request: RunRequest, mode: PromptMode
) -> list[str]:
    """The released CLI's flags, each only where its help lists it; the prompt last."""
    accepts = profile.options
    categories = profile.categories or frozenset()
    events = [e for e in request.events if e in categories]
    if "usage" in categories and "usage" not in events:
        events.append("usage")  # stream_start names the provider: is a $0 run free?
    argv = [*command, "run", "--json", "--agent", request.agent]
    wanted = [
        ("--conversation", request.conversation),
        ("--approval-policy", request.approval_policy),
        ("--events", ",".join(events)),
        ("--timeout", str(LONG_TIMEOUT_MS)),
    ]
    argv += [part for flag, value in wanted if flag in accepts and value for part in (flag, value)]
    if "--stream" in accepts and events:
        argv.append("--stream")  # events through a pipe come only when streaming
    if mode == "argv":
        argv += ["--", request.prompt]
    return argv
