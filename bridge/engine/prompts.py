"""Runner prompts (approvals, questions, secrets) as choices bound to the person who asked.

Each prompt gets an opaque, unguessable token; a choice is ``<token>.<code>`` (well under
Telegram's 64-byte ``callback_data``); a progress bubble's Stop is ``<run's token>.stop``.
:func:`issued` tells that shape from other data on a button, so a press on a button of a
run that is over settles only messages the gateway itself posted. Surfaces without
buttons show the same choices numbered. A secret is never collected in a shared chat: the
runner is told ``unavailable: shared-chat`` at once. An approval shows exactly what will run:
the tool's name and the preview are wrapped in code that their own backticks cannot close.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

from ..markdown import code_span, fence_for
from ..model import Choice, Outgoing, ReplyKind
from ..ports import Capabilities
from ..store import PromptRecord

SEP = "."
APPROVE, REJECT, APPROVE_ALL, REJECT_ALL, DECLINE = "y", "n", "ya", "na", "x"
STOP = "stop"  # the code of a progress bubble's Stop button
TOKEN_BYTES = 12
# a choice as issued: token_urlsafe(12) (16 characters), the separator, a code
_ISSUED = re.compile(r"[A-Za-z0-9_-]{16}\.(?:stop|ya|na|y|n|x|s[0-9]{1,3})")


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def split_choice(value: str) -> tuple[str, str]:
    token, _, code = value.partition(SEP)
    return token, code


def issued(value: str) -> bool:
    """Whether ``value`` has the shape of a choice the gateway issues (a prompt's, a Stop)."""
    return _ISSUED.fullmatch(value) is not None


@dataclass(frozen=True)
class Prompt:
    record: PromptRecord
    message: Outgoing


def from_event(
    event_type: str,
    data: dict[str, Any],
    *,
    run_id: int,
    conversation_id: int,
    requester: str,
    requester_name: str,
) -> PromptRecord | None:
    kind = {
        "approval_required": "approval",
        "user_input_required": "input",
        "user_secret_required": "secret",
    }.get(event_type)
    ident = data.get("toolCallId") if kind == "approval" else data.get("requestId")
    if kind is None or not isinstance(ident, str) or not ident:
        return None
    payload = {k: v for k, v in data.items() if k != "type"}
    payload["requesterName"] = requester_name
    return PromptRecord(
        token=new_token(),
        run_id=run_id,
        conversation_id=conversation_id,
        requester=requester,
        kind=kind,
        request_id=ident,
        payload=payload,
        created_at=time.time(),
    )


# A prompt's message is later edited to its settled text: the prompt with a line saying how
# it ended appended. Both must fit one message of the surface it is shown on, or the surface
# cuts off the reason (an edit is one message) and a prompt sent as two messages has its last
# one (the one with the buttons) overwritten by the prompt's beginning. The room is the
# surface's own ``Capabilities.max_length`` (Telegram's is 3500: its 4096 units less room for
# what the conversion of Markdown adds), counted here in UTF-16 code units, which is at
# least the number of characters any surface counts.
DEFAULT_ROOM = Capabilities().max_length  # a surface that says nothing of its own
MESSAGE_MAX, PREVIEW_MAX, QUESTION_MAX = 1500, 2500, 1500
MESSAGE_MIN = 500  # what an approval's message keeps when its preview needs the room
NAME_MAX = 200  # a tool's, a secret's, a person's name


def _units(text: str) -> int:
    """Length in UTF-16 code units (a character beyond the BMP, an emoji, counts two)."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def _clip(text: Any, n: int = MESSAGE_MAX) -> str:
    """``text`` in at most ``n`` UTF-16 units (cut with "…")."""
    s = str(text or "")
    if len(s) <= n // 2 or (len(s) <= n and _units(s) <= n):
        return s
    cut = s[: n - 1]
    over = _units(cut) - (n - 1)
    while over > 0:
        over -= 2 if ord(cut[-1]) > 0xFFFF else 1
        cut = cut[:-1]
    return cut + "…"


def _waited(waited_s: float) -> str:
    if waited_s < 120:
        return f"{waited_s:g} s"
    minutes = waited_s / 60
    return f"{minutes:.0f} minutes" if minutes < 1e9 else f"{minutes:.3g} minutes"


def _expired_line() -> str:
    return "⌛ Expired: the run ended without this answer."


def _unanswered_line(waited_s: float, told: str) -> str:
    return f"⌛ Expired: no answer within {_waited(waited_s)}; the agent was told {told}."


# the longest line a settled prompt gets (a wait's text is at most 17 characters)
SETTLED_ROOM = 2 + max(
    _units(_expired_line()), _units(_unanswered_line(999_999_999 * 60, "declined"))
)


def _approval_lines(head: str, message: str, preview: str, room: int) -> list[str]:
    """The approval's lines within ``room`` with its settled line: the preview (what will
    run) keeps its room first, the message gives way down to MESSAGE_MIN."""

    def lines(message_n: int, preview_n: int) -> list[str]:
        out = [head]
        if message:
            out.append(_clip(message, message_n))
        if preview:
            shown = _clip(preview, preview_n)
            fence = fence_for(shown)  # the preview's own fences cannot close it early
            out.append(f"{fence}\n{shown}\n{fence}")
        return out

    room -= SETTLED_ROOM
    full = lines(MESSAGE_MAX, PREVIEW_MAX)
    over = _units("\n\n".join(full)) - room
    if over <= 0:
        return full
    message_n = min(MESSAGE_MAX, _units(message[:MESSAGE_MAX]))
    message_n = max(min(message_n, MESSAGE_MIN), message_n - over)
    preview_n = min(PREVIEW_MAX, _units(preview[:PREVIEW_MAX]))
    while True:
        out = lines(message_n, preview_n)
        over = _units("\n\n".join(out)) - room
        if over <= 0 or preview_n <= 1:
            return out
        preview_n = max(1, preview_n - over)


def message_for(
    record: PromptRecord, *, others_pending: int, buttons: bool, room: int = DEFAULT_ROOM
) -> Outgoing:
    """The prompt as a message with choices (numbered in the text when there are no
    buttons), with its settled line within ``room`` (the surface's max_length)."""
    p = record.payload
    who = _clip(p.get("requesterName") or record.requester, NAME_MAX)
    choices: list[tuple[str, str, str]] = []
    if record.kind == "approval":
        tool = _clip(p.get("toolName") or p.get("tool") or "a tool", NAME_MAX)
        head = f"**Approval needed** for {code_span(tool)} (asked by {who})"
        message, preview = str(p.get("message") or ""), str(p.get("preview") or "")
        lines = _approval_lines(head, message, preview, room)
        choices = [(APPROVE, "Approve", "primary"), (REJECT, "Reject", "danger")]
        if others_pending:
            choices += [
                (APPROVE_ALL, f"Approve all ({others_pending + 1})", "default"),
                (REJECT_ALL, f"Reject all ({others_pending + 1})", "default"),
            ]
    elif record.kind == "input":
        lines = [f"**Question** for {who}: {_clip(p.get('question'), QUESTION_MAX)}"]
        for i, s in enumerate(p.get("suggestions") or []):
            if isinstance(s, dict):
                label = str(s.get("label") or s.get("value") or f"option {i + 1}")[:60]
                choices.append((f"s{i}", label, "default"))
        if p.get("allowCustom", True):
            lines.append("_Or reply with your own answer._")
        choices.append((DECLINE, "Skip", "default"))
    else:
        name = _clip(p.get("name") or "a secret", NAME_MAX)
        lines = [
            f"**The agent asks {who} for {name}.** Send it as your next message in this "
            "private chat (it is passed to the agent and removed from the gateway's records), "
            "or decline."
        ]
        choices = [(DECLINE, "Decline", "danger")]
    if not buttons:
        lines.append(
            "Reply with "
            + ", ".join(f"**{i}** ({label})" for i, (_, label, _) in enumerate(choices, 1))
            + "."
        )
    return Outgoing(
        kind=ReplyKind.PROMPT,
        text="\n\n".join(lines),
        choices=tuple(
            Choice(token=f"{record.token}{SEP}{code}", label=label, style=style)
            for code, label, style in choices
        )
        if buttons
        else (),
        requester=record.requester,
    )


def codes_for(record: PromptRecord, *, others_pending: int) -> list[str]:
    """Choice codes in display order (what the numbers of a numbered prompt mean)."""
    if record.kind == "approval":
        return [APPROVE, REJECT] + ([APPROVE_ALL, REJECT_ALL] if others_pending else [])
    if record.kind == "input":
        n = len([s for s in record.payload.get("suggestions") or [] if isinstance(s, dict)])
        return [f"s{i}" for i in range(n)] + [DECLINE]
    return [DECLINE]


def frame(record: PromptRecord, code: str, text: str | None = None) -> dict[str, Any]:
    """The stdin frame that answers ``record`` with choice ``code`` (or free ``text``)."""
    if record.kind == "approval":
        return {
            "type": "approval_decision",
            "toolCallId": record.request_id,
            "approved": code in (APPROVE, APPROVE_ALL),
        }
    if record.kind == "input":
        response = ""
        if text is not None:
            response = text
        elif code.startswith("s"):
            suggestions = [
                s for s in record.payload.get("suggestions") or [] if isinstance(s, dict)
            ]
            try:
                response = str(suggestions[int(code[1:])].get("value", ""))
            except (ValueError, IndexError):
                response = ""
        return {"type": "user_input_response", "requestId": record.request_id, "response": response}
    if text is not None:
        return {"type": "user_secret_response", "requestId": record.request_id, "value": text}
    return {"type": "user_secret_response", "requestId": record.request_id, "declined": True}


def unavailable_secret(record: PromptRecord) -> dict[str, Any]:
    return {
        "type": "user_secret_response",
        "requestId": record.request_id,
        "unavailable": "shared-chat",
    }


def expired_text(record: PromptRecord, room: int = DEFAULT_ROOM) -> str:
    """How a prompt's message reads once its run is over unanswered (its buttons gone)."""
    shown = message_for(record, others_pending=0, buttons=True, room=room).text
    return f"{shown}\n\n{_expired_line()}"


def unanswered_text(record: PromptRecord, waited_s: float, room: int = DEFAULT_ROOM) -> str:
    """How a prompt's message reads once nobody answered it in time (its buttons gone)."""
    shown = message_for(record, others_pending=0, buttons=True, room=room).text
    told = "rejected" if record.kind == "approval" else "declined"
    return f"{shown}\n\n{_unanswered_line(waited_s, told)}"


def settled_note(record: PromptRecord | None) -> str:
    """What became of a prompt whose buttons are gone, for a surface that shows it under the
    question when the thread is read (the web chat): which choice was made, never a secret's
    value. ``None``: the prompt is no longer in the store (expired long ago)."""
    if record is None or record.state == "expired":
        return "⌛ expired"
    answer = record.answer or {}
    if record.kind == "approval":
        return "✅ approved" if answer.get("approved") else "❌ rejected"
    if record.kind == "input":
        response = str(answer.get("response") or "")
        return f"✅ answered: {_clip(response, NAME_MAX)}" if response else "⏭ skipped"
    return "⏭ declined" if answer.get("declined") else "✅ secret sent"


def resolved_text(record: PromptRecord, code: str, actor_name: str, text: str | None) -> str:
    p = record.payload
    if record.kind == "approval":
        tool = _clip(p.get("toolName") or "a tool", NAME_MAX)
        verdict = "Approved" if code in (APPROVE, APPROVE_ALL) else "Rejected"
        return f"{verdict} {code_span(tool)} ({actor_name})"
    if record.kind == "input":
        if text is not None:
            return f"Answered by {actor_name}"
        if code == DECLINE:
            return f"Skipped by {actor_name}"
        return f"Answered by {actor_name}: {frame(record, code)['response']}"
    return f"Secret {'sent' if text is not None else 'declined'} by {actor_name}"
