"""One press policy for every surface: what a press does to the pressed message, and what
its presser is told (bridge/presses.py; the Slack and Telegram adapters say it in their
platform's terms, and their end-to-end tests show that)."""

from __future__ import annotations

import pytest

from bridge.engine.prompts import new_token
from bridge.model import Outgoing, ReplyKind
from bridge.ports import PressResult, PressStatus
from bridge.presses import MessageChange, press_plan

RESOLVED = Outgoing(ReplyKind.PROMPT, "✅ Approved by ada")
OURS = f"{new_token()}.y"  # a choice the gateway issued
FOREIGN = "some-other-apps-button"


def test_an_answered_press_edits_the_message_which_then_says_it_all() -> None:
    plan = press_plan(OURS, PressResult(PressStatus.OK, "Approved", RESOLVED))
    assert plan.change is MessageChange.EDIT and plan.resolved is RESOLVED
    assert plan.edited and not plan.refused and plan.text == "Approved"


def test_an_answered_press_with_nothing_to_show_keeps_the_message() -> None:
    plan = press_plan(OURS, PressResult(PressStatus.OK, "Stopping"))
    assert plan.change is MessageChange.KEEP and not plan.edited and not plan.refused


@pytest.mark.parametrize("resolved", [RESOLVED, None])
def test_a_press_on_a_prompt_that_is_over_settles_only_the_gateways_own_buttons(
    resolved: Outgoing | None,
) -> None:
    result = PressResult(PressStatus.EXPIRED, "This run has already ended.", resolved)
    ours = press_plan(OURS, result)
    expected = MessageChange.SETTLE if resolved is not None else MessageChange.DROP_BUTTONS
    assert ours.change is expected and ours.refused and not ours.edited
    foreign = press_plan(FOREIGN, result)  # another app's button: its message is not ours
    assert foreign.change is MessageChange.KEEP and foreign.refused


def test_a_press_by_someone_else_is_a_refusal_that_leaves_the_message() -> None:
    plan = press_plan(OURS, PressResult(PressStatus.NOT_YOURS, "Only ada can answer", RESOLVED))
    assert plan.change is MessageChange.KEEP and plan.refused
    assert plan.text == "Only ada can answer"
