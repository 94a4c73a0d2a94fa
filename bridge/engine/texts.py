"""What the engine says to people, in one place.

Every fixed sentence the engine sends (interrupted, stopped, shut down, waiting for a run
slot, files left out, a run's failure) is here, so wording is reviewed in one file and
tests name the constant instead of repeating it.
"""

from __future__ import annotations

import logging

from provisioning.rlimits import RunLimits

from ..logs import mask
from ..model import Attachment
from ..ports import DeliveryError, FileTooLarge
from ..runner import RunResult
from ..runner.base import LIMIT_HIT_FLAG
from .run_limits import hit_text
from .scheduler import Wait, WaitReason

log = logging.getLogger(__name__)


INTERRUPTED_TEXT = (
    "⚠️ Your message was interrupted before it was answered (the gateway stopped or "
    "restarted). Please send it again."
)


RUN_OVER_TOAST = "This run has already ended."


STOP_AFTER_RESTART_TEXT = (
    "⏹️ Nothing left to stop: the run this was meant for ended when the gateway restarted."
)


NEW_WITH_TEXT = (
    "🆕 Started a fresh conversation: the agent won't remember earlier messages; what you "
    "sent with the command is its first message. Files in this conversation's home stay."
)


FILES_WITH_COMMAND_TEXT = (
    "📎 The file sent with this command was not read by the agent: send it again as a "
    "message of its own."
)


PASSED_ON_TEXT = (
    "Your answer reached the agent just before the gateway restarted; the run it answered "
    "was cut off by the restart (see above)."
)


ENDED_PROMPT_TEXT = (
    "The question this answered ended when the gateway restarted, so nothing was passed on "
    "to the agent. If it was a new message, send it again."
)


RUN_OVER_TEXT = "⏹️ This run has ended."  # a bubble pressed after its run (its Stop gone)


MIB = 1024 * 1024  # sizes said to people in MB as Telegram counts them (its "20 MB" limit)


SHUTDOWN_TEXT = (
    "⚠️ The gateway is shutting down, so this run was stopped before it finished. "
    "Please send your message again in a minute."
)


def waiting_text(why: Wait) -> str:
    """The word to a message waiting for a run slot: why, and until when."""
    runs = f"{why.count} run{'' if why.count == 1 else 's'}"
    if why.reason is WaitReason.USER:
        return (
            f"🕐 You already have {runs} going (one waiting for your answer counts too), the "
            "most one person may have at once; this one starts as soon as one of them finishes."
        )
    if why.reason is WaitReason.TEAM:
        return (
            f"🕐 Your team or chat already has {runs} going, the most one team may have at "
            "once; this one starts as soon as one of them finishes."
        )
    return (
        f"🕐 The gateway is running {why.count} other run(s), its limit; yours starts as soon "
        "as one finishes."
    )


def left_out_text(left_out: list[tuple[Attachment, DeliveryError]]) -> str:
    """The notice naming the files of a message the run went without, and why."""
    large = [e for _, e in left_out if isinstance(e, FileTooLarge)]
    lines = []
    if large:
        names = ", ".join(
            e.name if e.size is None else f"{e.name} ({e.size / MIB:.1f} MB)" for e in large
        )
        limit = min(e.limit for e in large)
        lines.append(f"⚠️ Left out, over the {limit / MIB:g} MB limit for files: {names}.")
    for att, exc in left_out:
        if not isinstance(exc, FileTooLarge):  # the error names the file, or it is named here
            why = str(exc).rstrip(".")
            lines.append(
                f"⚠️ Left out: {why}." if att.name in why else f"⚠️ Left out, {att.name}: {why}."
            )
    return "\n".join(lines)


def failure_text(
    result: RunResult,
    stopped_by: str | None,
    limits: RunLimits | None = None,
    whole: RunLimits | None = None,
) -> str:
    if stopped_by is not None:
        return f"⏹️ Stopped by {stopped_by}."
    if result.timed_out:
        return f"⌛ {result.error}. Try a smaller request, or ask an operator to raise the limit."
    reason = result.error or result.code or "the run failed"
    says_exit = result.code in ("no_envelope", "bad_envelope")  # the reason names it already
    detail = (
        f" (exit code {result.exit_code})"
        if result.exit_code not in (None, 0, 1) and not says_exit
        else ""
    )
    text = f"❌ The agent could not answer: {reason}{detail}."
    if result.code in ("no_envelope", "bad_envelope", "failed") and not result.stopped:
        # the released CLI's provider failure has no error event: its stack trace on stderr
        from ..runner.envelope import useful_stderr

        lines = useful_stderr(result.stderr_tail, result.error)
        if lines:
            tail = mask("\n".join(lines))[-800:]  # masked whole, then cut
            text += f"\n\n```\n{tail}\n```"
    measured = result.flags.get(LIMIT_HIT_FLAG)
    hit = (
        None
        if limits is None
        else hit_text(limits, result.exit_code, result.stderr_tail, measured=measured, whole=whole)
    )
    if hit is not None and not result.stopped and not result.timed_out:
        text += f"\n\n{hit} Ask an operator to raise it if the task needs more."
    # what a runner printed goes to the chat: a key it was given (runner.extra_env) must not
    return mask(text)
