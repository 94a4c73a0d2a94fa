"""A progress bubble whose ``sendMessage`` landed while its answer was lost (an "orphan").

The Bot API has no idempotency key and no way to list a chat's messages, so the gateway
cannot learn the orphan's id: it must not post a second bubble, the answer must still come
once (carrying the summary the bubble would have shown), and a press on the orphan's Stop
once the run is over must be answered clearly and leave the message without buttons.
"""

from __future__ import annotations

from typing import Any

import pytest
from tg_support import (
    ADA,
    NOT_AN_AI,
    Call,
    FakeBotApi,
    buttons,
    post,
    press,
    private_chat,
    running_gateway,
    sample,
    seen,
    sent_to,
    update,
    wait_sent,
    wait_until,
)

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
READ_TIMEOUT_S = 5.0  # the gateway's Bot API read timeout (adapters/telegram/transport.py)


def is_bubble(params: dict[str, Any]) -> bool:
    return str(params.get("text", "")).startswith("⏳")


def bubbles(fake: FakeBotApi) -> list[Call]:
    """Progress bubbles in Ada's chat: every sendMessage Telegram carried out, answered or not."""
    return [c for c in sent_to(fake, ADA) if is_bubble(c.params)]


@pytest.mark.parametrize("kind", ["drop", "stall"])
async def test_a_bubble_whose_answer_was_lost_is_not_posted_again_and_its_stop_settles(
    env: dict[str, str], fake: FakeBotApi, kind: str
) -> None:
    # the first bubble is posted, then the connection drops (or stalls past the client's
    # read timeout) before the answer: the message is in the chat, the gateway never hears so
    fake.fail(
        "sendMessage",
        kind,
        commit=True,
        stall_s=READ_TIMEOUT_S + 1.5,
        when=lambda p: is_bubble(p),
    )
    chat = private_chat(ADA)
    # the run outlasts the lost answer and several of the bubble's edit intervals (2 s)
    delay = 6 if kind == "drop" else 12
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, update(730002000, chat, ADA, f"!delay {delay}")) == 200
        await wait_until(lambda: bool(bubbles(fake)), 15, "the progress bubble posted")
        (answer,) = await wait_sent(fake, ADA, NOT_AN_AI, timeout=40)

        async def settled() -> bool:
            return (
                sample(app, "jazz_bridge_runs_total", outcome="ok") == 1
                and not await app.store.undelivered_replies()
            )

        await wait_until(settled, 20, "the run recorded and its replies delivered")
        # exactly one bubble: the orphan; the gateway never learnt it, so nothing edited it
        (orphan,) = bubbles(fake)
        assert orphan.status == 200 and not orphan.answered, seen(fake)
        assert list(buttons(orphan)) == ["Stop"]
        orphan_id = int(orphan.result["message_id"])
        assert not [
            c for c in fake.calls if c.method.startswith("edit") and c.params.get("message_id")
        ], seen(fake)
        # the answer came once, and carries the run's summary (no bubble shows it)
        assert len([c for c in sent_to(fake, ADA) if NOT_AN_AI in c.params["text"]]) == 1
        assert "✓" in answer.params["text"] and "reply_markup" not in answer.params
        # nothing else in the chat claims to be live
        assert [c for c in sent_to(fake, ADA) if c.params.get("reply_markup")] == [orphan]

        # later, Ada presses the orphan's Stop: told the run is over, the buttons go
        stop = buttons(orphan)["Stop"]
        assert await post(app.port, press(730002001, ADA, chat, stop, message_id=orphan_id)) == 200
        told = fake.called("answerCallbackQuery")[-1]
        assert told.params["callback_query_id"] == "cq730002001"
        assert "ended" in told.params["text"], told.params
        (settle,) = [
            c
            for c in fake.calls
            if c.method in ("editMessageText", "editMessageReplyMarkup")
            and int(c.params["message_id"]) == orphan_id
        ]
        assert settle.status == 200 and not settle.params.get("reply_markup"), settle.params
        assert settle.method == "editMessageText" and "ended" in settle.params["text"]
        assert not str(settle.params["text"]).startswith("⏳")
        assert sample(app, "jazz_bridge_runs_total", outcome="interrupted") == 0


async def test_a_press_on_a_button_the_gateway_did_not_issue_leaves_the_message_alone(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    chat = private_chat(ADA)
    async with running_gateway(env) as (app, _client):
        # a Stop of the gateway's own shape whose run is unknown (say, from before a restart)
        ours = "AAAAAAAAAAAAAAAA.stop"
        assert await post(app.port, press(730002100, ADA, chat, ours, message_id=4321)) == 200
        told = fake.called("answerCallbackQuery")[-1]
        assert "ended" in told.params["text"]
        (settled,) = fake.called("editMessageText")
        assert int(settled.params["message_id"]) == 4321
        assert not settled.params.get("reply_markup")
        # data in no shape the gateway issues (another program's buttons on this bot)
        foreign = "opaque-token-issued-by-someone-else"
        assert await post(app.port, press(730002101, ADA, chat, foreign, message_id=4322)) == 200
        assert fake.called("answerCallbackQuery")[-1].params["callback_query_id"] == "cq730002101"
        assert not [
            c for c in fake.calls if c.method.startswith("edit") and c.params["message_id"] == 4322
        ]


async def answered_with_a_bubble(
    port: int, fake: FakeBotApi, chat: dict[str, Any], update_id: int
) -> tuple[int, str]:
    """Ada's run long enough for a progress bubble, answered: the bubble's id and its Stop."""
    assert await post(port, update(update_id, chat, ADA, "!delay 3")) == 200
    await wait_until(lambda: bool(bubbles(fake)), 15, "the progress bubble posted")
    (bubble,) = bubbles(fake)
    await wait_sent(fake, ADA, NOT_AN_AI, timeout=40)
    return int(bubble.result["message_id"]), buttons(bubble)["Stop"]


async def test_a_stop_pressed_after_the_bubble_got_its_summary_keeps_the_summary(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """A Stop pressed on a screen that still shows it, as the run ends: the press is told the
    run is over, and the bubble keeps the summary it was closed with."""
    chat = private_chat(ADA)
    async with running_gateway(env) as (app, _client):
        bubble_id, stop = await answered_with_a_bubble(app.port, fake, chat, 730002200)

        def edits() -> list[Call]:
            return [
                c
                for c in fake.calls
                if c.method.startswith("edit") and int(c.params["message_id"]) == bubble_id
            ]

        await wait_until(
            lambda: any("✓" in str(c.params.get("text", "")) for c in edits()),
            15,
            "the bubble closed with the run's summary",
        )
        before = len(edits())
        assert await post(app.port, press(730002201, ADA, chat, stop, message_id=bubble_id)) == 200
        told = fake.called("answerCallbackQuery")[-1]
        assert told.params["callback_query_id"] == "cq730002201"
        assert "ended" in told.params["text"], told.params
        # the summary stays (at most the buttons, already gone, are cleared again)
        assert not [c for c in edits()[before:] if c.method == "editMessageText"], seen(fake)


async def test_a_bubble_whose_summary_edit_failed_is_settled_by_its_stop(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """The summary could not replace the bubble (Telegram refused the edit): it still reads
    "working" with a Stop button, and a press on it must settle it, not only toast."""
    fake.fail_next("editMessageText", "forbidden", when=lambda p: "✓" in str(p.get("text")))
    chat = private_chat(ADA)
    async with running_gateway(env) as (app, _client):
        bubble_id, stop = await answered_with_a_bubble(app.port, fake, chat, 730002300)
        await wait_until(
            lambda: any(
                c.method == "editMessageText"
                and "✓" in str(c.params.get("text"))
                and c.status != 200
                for c in fake.calls
            ),
            15,
            "the summary edit refused",
        )
        await wait_until(lambda: sample(app, "jazz_bridge_runs_total", outcome="ok") == 1, 15)
        assert await post(app.port, press(730002301, ADA, chat, stop, message_id=bubble_id)) == 200
        settle = [
            c
            for c in fake.calls
            if c.method == "editMessageText"
            and int(c.params["message_id"]) == bubble_id
            and "ended" in str(c.params.get("text"))
        ]
        assert len(settle) == 1 and not settle[0].params.get("reply_markup"), seen(fake)
