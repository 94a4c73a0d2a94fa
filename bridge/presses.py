"""What a button press does to the pressed message and what the presser is told, for
every surface alike.

A press reaches the core as :meth:`~bridge.ports.Gateway.press`; its
:class:`~bridge.ports.PressResult` says how it went. What follows from that was written
twice, once per adapter, and drifted: which presses edit the message, which leave it as
it was, which take its buttons away (a Stop of a run that is over, a prompt nobody can
answer now: touched only when the button is one the gateway issued, never another app's),
and which are refusals to show as such. :func:`press_plan` decides; an adapter only says it
in its platform's terms (an edit, an ephemeral message, a toast or an alert).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .engine.prompts import issued
from .model import Outgoing
from .ports import PressResult, PressStatus

NOT_ALLOWED_TEXT = "You are not allowed to use this bot."  # a presser the allowlist refuses
PRESS_FAILED_TEXT = "Something went wrong; please try again."  # a press the core could not take


class MessageChange(Enum):
    """What becomes of the pressed message."""

    KEEP = "keep"  # as it was (a press refused, a button not the gateway's)
    EDIT = "edit"  # to the core's ``resolved`` text: the press answered it
    SETTLE = "settle"  # to ``resolved``, its buttons gone: its prompt or run is over
    DROP_BUTTONS = "drop_buttons"  # its buttons gone, its text kept (nothing to put instead)


@dataclass(frozen=True)
class PressPlan:
    change: MessageChange
    resolved: Outgoing | None  # the message's new text for EDIT and SETTLE
    text: str  # what to tell the presser ("" nothing)
    refused: bool  # not theirs, or over: a surface shows it as a refusal (an alert)

    @property
    def edited(self) -> bool:
        """Whether the message itself now says how the press went (the edit says it all)."""
        return self.change is MessageChange.EDIT


def press_plan(data: str, result: PressResult) -> PressPlan:
    """The plan for a press of button ``data`` that the core answered with ``result``."""
    status, resolved = result.status, result.resolved
    if status is PressStatus.OK and resolved is not None:
        change = MessageChange.EDIT
    elif status is PressStatus.EXPIRED and issued(data):
        change = MessageChange.SETTLE if resolved is not None else MessageChange.DROP_BUTTONS
    else:
        change = MessageChange.KEEP
    refused = status in (PressStatus.NOT_YOURS, PressStatus.EXPIRED)
    return PressPlan(change, resolved, result.text, refused)
