"""What every runner backend takes and returns, whatever process or service runs the turn.

The turn engine starts a run with a :class:`RunRequest`, reads :class:`RunnerEvent` from
the handle while it works, answers prompts through it, and gets one :class:`RunResult`,
success or failure, never silence.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass, field, replace
from typing import Any

from provisioning.homes import Home
from provisioning.sandbox import RunIdentity

PROMPT_EVENTS = frozenset({"approval_required", "user_input_required", "user_secret_required"})


@dataclass(frozen=True)
class RunRequest:
    home: Home
    identity: RunIdentity
    conversation: str  # the Jazz conversation key: "<thread key>#<epoch>"
    prompt: str
    agent: str
    approval_policy: str
    timeout_s: float
    events: tuple[str, ...] = ("tools", "reasoning", "text", "approval", "subagent", "spend")
    # the person's files, as the prompt names them: from the run's working directory (the
    # workspace) for a backend that starts runs there, else by their full paths
    attachments: tuple[str, ...] = ()
    kill_tag: str | None = None  # what finds the run's processes (see runner.procs)


@dataclass(frozen=True)
class RunnerEvent:
    type: str
    data: dict[str, Any]


@dataclass(frozen=True)
class RunResult:
    ok: bool
    answer: str = ""
    code: str | None = None  # envelope code on failure (failed, interrupted, ...) or ours
    error: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    cost_usd: float = 0.0
    cost_known: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    duration_ms: int = 0
    stderr_tail: list[str] = field(default_factory=list)
    timed_out: bool = False
    stopped: bool = False
    flags: dict[str, Any] = field(default_factory=dict)  # truncated, costCapped, ...


# a failed run's flag: the limit its cgroup says it ran into ("memory", "processes")
LIMIT_HIT_FLAG = "limitHit"


def finalize(
    result: RunResult, *, timeout_s: float, timed_out: bool, stop_reason: str | None
) -> RunResult:
    """What every backend does last: a run we ended says why (timeout, stop), not its echo.

    A run that answered all the same keeps its answer, whether a stop or the timeout ended
    it: the contract's runner prints an "interrupted" failure when it is stopped, so a
    success means it had finished (the stop came as it exited, or it was slow to exit after
    answering) and the runner holds that exchange in its history already; dropping it would
    leave the chat and that history apart. ``timed_out`` stays set on it for the logs.
    """
    if result.ok:
        return replace(result, timed_out=True) if timed_out else result
    if timed_out:
        return replace(
            result,
            ok=False,
            code="timeout",
            error=f"the run took longer than {timeout_s:g}s and was stopped",
            timed_out=True,
        )
    if stop_reason is not None and not result.ok:
        return replace(
            result,
            ok=False,
            code="interrupted",
            stopped=True,
            error=result.error or stop_reason,
        )
    return result


class RunHandle(abc.ABC):
    """One run in flight."""

    @abc.abstractmethod
    def events(self) -> AsyncIterator[RunnerEvent]:
        """Events in order; ends when the run's event stream ends."""

    @abc.abstractmethod
    async def answer(self, frame: dict[str, Any]) -> None:
        """Send a prompt's answer (``approval_decision``, ``user_input_response``, ...)."""

    @abc.abstractmethod
    async def stop(self, reason: str = "stopped") -> None:
        """End the run and everything it started."""

    @abc.abstractmethod
    async def wait(self) -> RunResult:
        """The outcome, once the run has ended (its main process, its output read)."""

    async def settled(self) -> None:  # noqa: B027 - optional hook
        """Returns once nothing the run started is left (await before the next run).

        A backend may finish sweeping leftovers after :meth:`wait` has returned, so that
        the answer is recorded and delivered meanwhile; the turn engine awaits this before
        the conversation's next run and at shutdown.
        """


class RunnerBackend(abc.ABC):
    name: str
    # whether every run starts in its home's ``workspace`` (its working directory), so a
    # path relative to that names the same file for the agent
    runs_in_workspace: bool = False

    @abc.abstractmethod
    async def start(self, request: RunRequest) -> RunHandle: ...

    async def end_leftovers(self, conversations: Collection[str]) -> None:  # noqa: B027
        """End the runs of ``conversations`` (``RunRequest.conversation``) that an earlier
        gateway process started and that may still work where this backend runs them: a
        daemon keeps a run when its client dies. Called once at start, before any run, for
        the runs the restart interrupted; the conversation's next run would otherwise work
        beside it and fork its history. A spawned run's processes are ended by their tag
        instead (the turn engine), so by default there is nothing to do."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the backend holds (sessions)."""
