"""Albums at the edges: /stop while the items are joined, the queue limit counting an album
once (behind a run, and over the limit), an album sent as the answer to a question. Each
failed on the first version of the feature (5d66021), found by a review.

The real gateway and the real PTB client against the fake Bot API, the reference runner;
every wait is bounded (wait_until / wait_sent), nothing sleeps to synchronise.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_telegram_albums import album, states
from tg_support import (
    ADA,
    FakeBotApi,
    buttons,
    post,
    press,
    private_chat,
    running_gateway,
    texts,
    update,
    wait_sent,
    wait_until,
)

from bridge.model import InboxState

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")

FINAL = (InboxState.DONE, InboxState.FAILED, InboxState.INTERRUPTED, InboxState.MERGED)


def joining(app: Any) -> bool:
    """Some conversation's worker is waiting for an album's other items."""
    assert app.engine is not None
    return any(slot.joining is not None for slot in app.engine._slots.values())


async def all_delivered(app: Any) -> bool:
    return not await app.store.undelivered_replies()


async def test_stop_sent_while_an_albums_items_are_joined_stops_its_run(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """Nothing running, an album arrives, the person sends /stop at once (within the second
    the worker waits for the album's other items): its run is stopped as it starts (it was
    answered "Nothing is running", and the album ran anyway)."""
    chat = private_chat(ADA)
    async with running_gateway(env) as (app, _client):
        for body in album(fake, 732000001, chat, "13589170000000101", "!delay 1 slow album", 2):
            assert await post(app.port, body) == 200
        await wait_until(lambda: joining(app), 10, "the worker joining the album's items")
        assert await post(app.port, update(732000009, chat, ADA, "/stop")) == 200

        def answered() -> bool:
            return bool(texts(fake, ADA, "Stopped") or texts(fake, ADA, "Nothing is running"))

        await wait_until(answered, 20, "the answer to /stop")
        assert not texts(fake, ADA, "Nothing is running"), texts(fake, ADA)

        async def album_closed() -> bool:
            return all(s in FINAL for s in await states(app, 732000001, 2))

        await wait_until(album_closed, 20, "the album's run closed")
        assert (await states(app, 732000001, 2))[0] is InboxState.FAILED  # stopped, not run


async def test_an_album_waiting_behind_a_run_counts_once_against_the_queue_limit(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """Two messages may wait. A run waits for an approval; an album of three arrives (it is
    one message), then the person's text about it. Only one message waits, so the text is
    queued (it was refused as "3 messages are already waiting": every queued item counted)."""
    env["JAZZ_BRIDGE_LIMITS__MAX_QUEUED_PER_CONVERSATION"] = "2"
    chat = private_chat(ADA)
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, update(732100001, chat, ADA, "!approve deploy")) == 200
        (prompt,) = await wait_sent(fake, ADA, "deploy")
        for body in album(fake, 732100002, chat, "13589170000000102", "three photos", 3):
            assert await post(app.port, body) == 200
        assert await post(app.port, update(732100005, chat, ADA, "what do you see")) == 200
        approve = buttons(prompt)["Approve"]
        prompt_id = int(prompt.result["message_id"])
        assert await post(app.port, press(732100010, ADA, chat, approve, prompt_id)) == 200

        async def text_closed() -> bool:
            return (await states(app, 732100005, 1))[0] in FINAL

        await wait_until(text_closed, 30, "the text sent after the album closed")
        await wait_until(lambda: all_delivered(app), 30, "every reply delivered")
        assert not texts(fake, ADA, "not queued"), texts(fake, ADA)
        assert (await states(app, 732100005, 1))[0] is InboxState.DONE


async def test_an_album_over_the_queue_limit_is_refused_once(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """One message may wait and one does. An album of three sent now is one message over
    the limit: one "not queued" answer, its other items closed without a word (each item
    was refused on its own: three answers)."""
    env["JAZZ_BRIDGE_LIMITS__MAX_QUEUED_PER_CONVERSATION"] = "1"
    chat = private_chat(ADA)
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, update(732200001, chat, ADA, "!approve deploy")) == 200
        await wait_sent(fake, ADA, "deploy")
        assert await post(app.port, update(732200002, chat, ADA, "first in line")) == 200
        for body in album(fake, 732200003, chat, "13589170000000103", "three photos", 3):
            assert await post(app.port, body) == 200

        async def album_closed() -> bool:
            return all(s in FINAL for s in await states(app, 732200003, 3))

        await wait_until(album_closed, 20, "the album's items closed")
        await wait_until(lambda: all_delivered(app), 20, "every reply delivered")
        assert len(texts(fake, ADA, "not queued")) == 1, texts(fake, ADA)


async def test_an_album_sent_as_the_answer_to_a_question_is_answered_once(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """The agent asks a question (free text allowed); the person answers with an album
    (caption "blue"). The captioned item answers the question (an answer carries no file);
    the other items are closed with it. They ran afterwards as a turn of their own with no
    caption, or (reaching the engine before the answer was recorded) were each answered
    "This request was already answered.". One message sent, one answer owed."""
    chat = private_chat(ADA)
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, update(732300001, chat, ADA, "!ask Which colour?")) == 200
        await wait_sent(fake, ADA, "Which colour?")
        for body in album(fake, 732300002, chat, "13589170000000104", "blue", 3):
            assert await post(app.port, body) == 200
        await wait_sent(fake, ADA, "you answered: blue")

        async def album_closed() -> bool:
            return all(s in FINAL for s in await states(app, 732300002, 3))

        await wait_until(album_closed, 20, "the album's items closed")
        await wait_until(lambda: all_delivered(app), 20, "every reply delivered")
        assert not texts(fake, ADA, "already answered"), texts(fake, ADA)
        assert len(texts(fake, ADA, "You said")) == 1, texts(fake, ADA)  # the question's run
