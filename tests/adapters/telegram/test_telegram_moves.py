"""A group upgraded to a supergroup keeps its conversation (adapters/telegram/moves.py).

Telegram gives the group a new chat id and says so with ``migrate_to_chat_id`` (in the old
chat) and ``migrate_from_chat_id`` (in the new one). The next message, from the new id,
continues the same conversation in the same home (before: a new conversation, the history
forgotten, the files left in the old home), also after a restart, and an allowlist that
names the old id still lets the group in. The answer goes to the new id.

The real gateway and PTB client against the fake Bot API; every wait is bounded.
"""

from __future__ import annotations

from typing import Any

import pytest
from tg_support import (
    ADA,
    FakeBotApi,
    mention,
    post,
    running_gateway,
    update,
    wait_sent,
)

from bridge.model import InboxState

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")

OLD = -4001234567  # a basic group's id
NEW = -1004001234567  # the supergroup it became
OLD_CHAT = {"id": OLD, "title": "Ops", "type": "group"}
NEW_CHAT = {"id": NEW, "title": "Ops", "type": "supergroup"}


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
