"""Review: a button press is answered (``answerCallbackQuery``) before any slow work.

The adapter's own rule (``TelegramAdapter._on_callback``): "The answer goes first: the
button spins until it arrives, and the edit waits for the chat's pace (seconds in a group)
and may be slow or fail; neither delays it." "Approve all" breaks it: the core edits every
*other* prompt's message (each paced, ~3 s apart in a group) inside ``press``, before the
adapter gets to answer the query, so the person's button spins for seconds per pending
approval (and past Telegram's answer window with a few of them).
"""

from __future__ import annotations

import pytest
from tg_support import (
    ADA,
    GRACE,
    GROUP,
    GROUP_CHAT,
    Call,
    FakeBotApi,
    buttons,
    mention,
    post,
    press,
    private_chat,
    running_gateway,
    sent_to,
    update,
    wait_sent,
    wait_until,
)

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


async def test_approve_all_is_answered_before_the_other_prompts_are_edited(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, mention(730009100, GROUP_CHAT, GRACE, "!approve2 bash")) == 200
        first, second = await wait_sent(fake, GROUP, "Approval needed", count=2)
        first_id = int(first.result["message_id"])
        second_id = int(second.result["message_id"])
        approve_all = next(v for k, v in buttons(second).items() if k.startswith("Approve all"))
        # the webhook answers 200 only once the press is handled, answered and settled
        pressed = press(730009101, GRACE, GROUP_CHAT, approve_all, second_id)
        assert await post(app.port, pressed) == 200

        calls = fake.calls
        answered = next(
            i
            for i, c in enumerate(calls)
            if c.method == "answerCallbackQuery"
            and c.params.get("callback_query_id") == "cq730009101"
        )
        other_edits = [
            i
            for i, c in enumerate(calls)
            if c.method == "editMessageText" and int(c.params["message_id"]) == first_id
        ]
        assert other_edits, "the first prompt's message was settled by Approve all"
        between = [(c.method, c.params.get("message_id")) for c in calls[other_edits[0] :]]
        assert answered < other_edits[0], (
            f"answerCallbackQuery came after the edit of the other prompt's message: {between}"
        )


async def test_an_operator_who_presses_stop_is_named_not_shown_as_a_number(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """Stop pressed by the requester reads "Stopped by Ada." (the name /stop shows); pressed
    by an operator (``telegram.operators``) it reads "Stopped by 222222222.": ``press`` gets
    only the presser's id, and the adapter has the name (``query.from_user``) but no way to
    pass it. /stop by the same operator says "Stopped by Grace."."""
    env["JAZZ_BRIDGE_TELEGRAM__OPERATORS"] = f"[{GRACE}]"
    async with running_gateway(env) as (app, _client):
        chat = private_chat(ADA)
        assert await post(app.port, update(730009300, chat, ADA, "!delay 20")) == 200

        def bubble() -> list[Call]:
            return [c for c in sent_to(fake, ADA) if c.params.get("reply_markup")]

        await wait_until(lambda: bool(bubble()), 15, "a progress bubble with a Stop button")
        stop = buttons(bubble()[0])["Stop"]
        grace = press(730009301, GRACE, chat, stop)
        grace["callback_query"]["from"]["first_name"] = "Grace"
        assert await post(app.port, grace) == 200
        (stopped,) = await wait_sent(fake, ADA, "Stopped by")
        assert "Stopped by Grace" in stopped.params["text"], stopped.params["text"]
