"""A group upgraded to a supergroup keeps its conversation (adapters/telegram/moves.py).

Telegram gives the group a new chat id and says so with ``migrate_to_chat_id`` (in the old
chat) and ``migrate_from_chat_id`` (in the new one). The next message, from the new id,
continues the same conversation in the same home (before: a new conversation, the history
forgotten, the files left in the old home), also after a restart and for the messages
polled in the same batch as the upgrade, and an allowlist that names the old id still lets
the group in. The answer goes to the new id, also one to a group upgraded while its run
works (Telegram refuses every call to the old id, naming the new one).

The real gateway and PTB client against the fake Bot API; every wait is bounded."""

from __future__ import annotations

from typing import Any

import pytest
from fake_bot_api import Failure
from tg_support import (
    ADA,
    NOT_AN_AI,
    FakeBotApi,
    mention,
    polling,
    post,
    running_gateway,
    sample,
    seen,
    sent_to,
    texts,
    to_chat,
    update,
    wait_sent,
    wait_until,
)

from bridge.model import InboxState

# PTB 22 itself warns when it builds a RetryAfter (its type becomes timedelta in v23)
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


OLD = -4001234567  # a basic group's id
NEW = -1004001234567  # the supergroup it became
OLD_CHAT = {"id": OLD, "title": "Ops", "type": "group"}
NEW_CHAT = {"id": NEW, "title": "Ops", "type": "supergroup"}
BATCH_OLD = -4001234568  # a basic group's id
BATCH_NEW = -1004001234568  # the supergroup it became
BATCH_OLD_CHAT = {"id": BATCH_OLD, "title": "Ops", "type": "group"}
BATCH_NEW_CHAT = {"id": BATCH_NEW, "title": "Ops", "type": "supergroup"}


def moved_from(update_id: int) -> dict[str, Any]:
    """The service message Telegram posts in the new supergroup."""
    body = update(update_id, NEW_CHAT, ADA, "", migrate_from_chat_id=OLD)
    del body["message"]["text"]
    return body


def moved_to(update_id: int) -> dict[str, Any]:
    """The service message Telegram posts in the old group."""
    body = update(update_id, OLD_CHAT, ADA, "", migrate_to_chat_id=NEW)
    del body["message"]["text"]
    return body


async def thread_keys(app: Any) -> dict[str, str]:
    """Each stored message's text -> its thread key."""
    keys = {}
    for state in InboxState:
        for msg in await app.store.messages_in_state(state):
            keys[msg.text] = msg.thread_key
    return keys


@pytest.mark.parametrize("notice", [moved_from, moved_to], ids=["from-new", "to-old"])
async def test_an_upgraded_group_continues_its_conversation(
    env: dict[str, str], fake: FakeBotApi, notice: Any
) -> None:
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, mention(731400001, OLD_CHAT, ADA, "before the move")) == 200
        await wait_sent(fake, OLD, "before the move")
        assert await post(app.port, notice(731400002)) == 200
        assert await post(app.port, mention(731400003, NEW_CHAT, ADA, "after the move")) == 200
        await wait_sent(fake, NEW, "after the move")  # answered in the new chat
        keys = await thread_keys(app)
        assert keys["before the move"] == keys["after the move"] == f"telegram:{OLD}", keys
    async with running_gateway(env) as (app, _client):  # remembered across a restart
        assert await post(app.port, mention(731400004, NEW_CHAT, ADA, "after a restart")) == 200
        await wait_sent(fake, NEW, "after a restart")
        assert (await thread_keys(app))["after a restart"] == f"telegram:{OLD}"
        assert len(await app.store.conversations()) == 1


async def test_an_allowlist_naming_the_old_group_lets_the_upgraded_one_in(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    env["JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE"] = "false"
    env["JAZZ_BRIDGE_TELEGRAM__ALLOWED_CHATS"] = f"[{OLD}]"
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, mention(731400011, NEW_CHAT, ADA, "not yet moved")) == 200
        assert await post(app.port, moved_from(731400012)) == 200
        assert await post(app.port, mention(731400013, NEW_CHAT, ADA, "moved now")) == 200
        await wait_sent(fake, NEW, "moved now")
        keys = await thread_keys(app)
        assert "not yet moved" not in keys, "a chat off the allowlist was let in"
        assert keys["moved now"] == f"telegram:{OLD}"


def service(update_id: int, chat: dict[str, Any], **moved: int) -> dict[str, Any]:
    body = update(update_id, chat, ADA, "", **moved)
    del body["message"]["text"]
    return body


async def test_messages_polled_with_the_upgrade_continue_the_old_conversation(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    # polling, and an allowlist naming the group's old id only
    polling(env)
    env["JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE"] = "false"
    env["JAZZ_BRIDGE_TELEGRAM__ALLOWED_CHATS"] = f"[{BATCH_OLD}]"
    fake.queue_update(service(741400001, BATCH_OLD_CHAT, migrate_to_chat_id=BATCH_NEW))
    fake.queue_update(service(741400002, BATCH_NEW_CHAT, migrate_from_chat_id=BATCH_OLD))
    fake.queue_update(mention(741400003, BATCH_NEW_CHAT, ADA, "right after the upgrade"))
    async with running_gateway(env) as (app, _client):
        await wait_sent(fake, BATCH_NEW, "right after the upgrade")
        keys = {
            msg.text: msg.thread_key
            for state in InboxState
            for msg in await app.store.messages_in_state(state)
        }
        assert keys == {"right after the upgrade": f"telegram:{BATCH_OLD}"}


async def test_an_answer_to_a_group_upgraded_meanwhile_goes_to_the_supergroup(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """A basic group upgraded to a supergroup while its run works (an admin turns on topics,
    a public link, ...): every call to the old id is refused with ``migrate_to_chat_id``
    (PTB's ChatMigrated). It was mapped to a permanent failure, so the answer was recorded
    as failed and never posted, though Telegram said where it goes. Now the call is made
    again in the supergroup, and the thread's later calls go there directly."""
    migrated = {
        "ok": False,
        "error_code": 400,
        "description": "Bad Request: group chat was upgraded to a supergroup chat",
        "parameters": {"migrate_to_chat_id": NEW},
    }
    methods = ("sendMessage", "editMessageText", "sendChatAction", "sendPhoto", "sendDocument")
    for method in methods:
        for _ in range(20):
            fake.failures.append(Failure(method, 400, migrated, lambda p: int(p["chat_id"]) == OLD))
    chat = {"id": OLD, "type": "group", "title": "Old group"}
    async with running_gateway(env) as (app, _client):
        # 6 s: the bubble is edited and typing renewed while the run works
        assert (
            await post(app.port, mention(730300001, chat, ADA, "!delay 6 !artifact plot.png"))
            == 200
        )

        def settled() -> bool:
            failed = sample(app, "jazz_bridge_replies_total", surface="telegram", result="failed")
            return failed > 0 or bool(sent_to(fake, NEW, "sendPhoto"))

        await wait_until(settled, 30, "the answer and its file sent or given up")
        assert texts(fake, NEW, NOT_AN_AI), seen(fake)
        assert sent_to(fake, NEW, "sendChatAction")
        edits = [c for c in fake.called("editMessageText") if c.params["chat_id"] == NEW]
        assert edits, seen(fake)
        # the move is remembered: the old id was tried only by calls already under way
        old = to_chat(fake, OLD)
        assert {c.status for c in old} == {400} and len(old) <= 2, seen(fake)
