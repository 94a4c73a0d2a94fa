"""A group upgraded to a supergroup while the gateway was down (or busy) keeps its
conversation for the messages polled in the same batch as the upgrade.

A polled batch's messages are handed to the core together; the upgrade's service
message was noted only after its store write, while the messages behind it, from the new
chat id, were already read against the old map: with an allowlist naming the group's
old id they were refused, else they started a new conversation in a new home.

The real gateway and PTB client against the fake Bot API (polling); every wait bounded.
"""

from __future__ import annotations

from typing import Any

import pytest
from tg_support import ADA, FakeBotApi, mention, running_gateway, update, wait_sent

from bridge.model import InboxState

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")

OLD = -4001234568  # a basic group's id
NEW = -1004001234568  # the supergroup it became
OLD_CHAT = {"id": OLD, "title": "Ops", "type": "group"}
NEW_CHAT = {"id": NEW, "title": "Ops", "type": "supergroup"}


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    """Polling, and an allowlist naming the group's old id only."""
    del env["JAZZ_BRIDGE_TELEGRAM__WEBHOOK_URL"]
    env["JAZZ_BRIDGE_TELEGRAM__POLL_TIMEOUT_S"] = "1"
    env["JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE"] = "false"
    env["JAZZ_BRIDGE_TELEGRAM__ALLOWED_CHATS"] = f"[{OLD}]"
    return env


def service(update_id: int, chat: dict[str, Any], **moved: int) -> dict[str, Any]:
    body = update(update_id, chat, ADA, "", **moved)
    del body["message"]["text"]
    return body


async def test_messages_polled_with_the_upgrade_continue_the_old_conversation(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    fake.queue_update(service(741400001, OLD_CHAT, migrate_to_chat_id=NEW))
    fake.queue_update(service(741400002, NEW_CHAT, migrate_from_chat_id=OLD))
    fake.queue_update(mention(741400003, NEW_CHAT, ADA, "right after the upgrade"))
    async with running_gateway(env) as (app, _client):
        await wait_sent(fake, NEW, "right after the upgrade")
        keys = {
            msg.text: msg.thread_key
            for state in InboxState
            for msg in await app.store.messages_in_state(state)
        }
        assert keys == {"right after the upgrade": f"telegram:{OLD}"}
