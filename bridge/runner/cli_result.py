"""One CLI run's result, assembled once it is over: its envelope, and what ended it.

The envelope is parsed (:mod:`.envelope`) with the exit status (behind a private
``/proc``'s init shell, 128+N is signal N), then marked with what the gateway knows and
the runner could not say: the limit its cgroup ran into, a question the released CLI
could not ask, the timeout or stop that ended it (:func:`.base.finalize`), an approval
nobody could give. Kept apart from the handle (:mod:`.cli_handle`) so the rules a failure
reply follows are read in one place.
"""

from __future__ import annotations

from dataclasses import replace

from provisioning import private_proc

from .base import LIMIT_HIT_FLAG, RunRequest, RunResult, finalize
from .cli_streams import CliStreams
from .envelope import parse_envelope


def build_result(
    streams: CliStreams,
    request: RunRequest,
    *,
    returncode: int | None,
    duration_ms: int,
    private_proc_run: bool,
    argv_hidden: bool,
    limit_hit: str | None,
    timed_out: bool,
    stop_reason: str | None,
) -> RunResult:
    """The result of the run ``streams`` were read from, once its process has exited."""
    if private_proc_run:  # behind the namespace's init shell: 128+N is signal N
        returncode = private_proc.exit_code(returncode)
    result = parse_envelope(
        streams.envelope,
        exit_code=returncode,
        stderr_tail=list(streams.stderr_tail),
        duration_ms=duration_ms,
        garbage=streams.garbage,
        provider=streams.provider,
    )
    if limit_hit is not None and not result.ok:
        result = replace(result, flags={**result.flags, LIMIT_HIT_FLAG: limit_hit})
    if streams.question and result.ok:
        result = replace(result, flags={**result.flags, "unasked_question": streams.question})
    result = finalize(
        result,
        timeout_s=request.timeout_s,
        timed_out=timed_out,
        stop_reason=stop_reason,
    )
    if streams.unanswerable is not None and not result.ok:
        result = replace(
            result,
            code="approval_unavailable",
            stopped=False,
            error=(
                f"the agent needed an approval for {streams.unanswerable}, which this Jazz "
                "CLI can only take when the message is passed as an argument, and "
                f"{_why_not_an_argument(request, argv_hidden)}; an operator can raise "
                "runner.approval_policy or fix that"
            ),
        )
    return result


def _why_not_an_argument(request: RunRequest, argv_hidden: bool) -> str:
    """Why the prompt went on stdin (see :func:`.cli_argv.prompt_mode`)."""
    if not argv_hidden:
        return "runs here cannot have a private /proc"
    if "\0" in request.prompt:  # prompt_mode's other reason for stdin
        return "the message contains a NUL character, which no argument can hold"
    return "the message is too long to pass as an argument"
