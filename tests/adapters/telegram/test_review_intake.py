"""Review: who may start a turn in a group.

``convert.to_inbound`` drops messages "sent by a bot or on behalf of a chat" by looking at
``from.is_bot`` only. A channel's post that Telegram copies into the channel's linked
discussion group (``is_automatic_forward``) is sent on behalf of the channel: its ``from`` is
Telegram's service account 777000, which is *not* flagged as a bot, and its ``sender_chat``
is the channel. So in a discussion group with ``group_trigger = "all"`` every channel post
starts an agent run (and costs money) with "Telegram" as the person who asked, and the bot
answers under each post.
"""

from __future__ import annotations

import pytest
from tg_support import (
    GRACE,
    GROUP,
    GROUP_CHAT,
    FakeBotApi,
    post,
    running_gateway,
    sample,
    stored,
    update,
    wait_until,
)

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")

CHANNEL = {"id": -1005550001111, "title": "Announcements", "type": "channel"}
TELEGRAM_SERVICE = {"id": 777000, "is_bot": False, "first_name": "Telegram"}


async def test_a_channel_post_forwarded_into_its_discussion_group_is_not_a_turn(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    env["JAZZ_BRIDGE_TELEGRAM__GROUP_TRIGGER"] = "all"
    forwarded = {
        "update_id": 730009200,
        "message": {
            "message_id": 901,
            "from": TELEGRAM_SERVICE,
            "sender_chat": CHANNEL,
            "chat": GROUP_CHAT,
            "date": 1764669660,
            "is_automatic_forward": True,
            "forward_origin": {
                "type": "channel",
                "chat": CHANNEL,
                "message_id": 12,
                "date": 1764669650,
            },
            "text": "New release 2.0 is out! Changelog inside.",
        },
    }
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, forwarded) == 200

        def counted() -> bool:
            labels = ("ignored", "accepted", "denied")
            return any(
                sample(app, "jazz_bridge_messages_total", platform="telegram", outcome=o) > 0
                for o in labels
            )

        await wait_until(counted, 10, "the update counted")
        assert await stored(app) == 0, "the channel's post was stored as a turn"
        assert (
            sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="ignored") == 1
        )
        assert not [c for c in fake.called("sendMessage") if int(c.params["chat_id"]) == GROUP]


async def test_a_bare_command_of_another_bot_in_a_group_is_not_a_turn(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """In a group the bot answers mentions, replies to it and commands (README). Any
    ``/word`` counts as addressed, though: ``/weather Berlin``, meant for a weather bot in the
    same group (Telegram hands a bare command to every bot that was last to speak, or that
    reads all messages), is not one of this bot's commands, so the core sends it to the agent
    as text and the group gets an agent's answer nobody asked for. Bare commands the bot
    offers (``/status``) and any command ``@jazz_example_bot`` stay addressed."""
    body = update(
        730009210,
        GROUP_CHAT,
        GRACE,
        "/weather Berlin",
        entities=[{"offset": 0, "length": 8, "type": "bot_command"}],
    )
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, body) == 200

        def counted() -> bool:
            return any(
                sample(app, "jazz_bridge_messages_total", platform="telegram", outcome=o) > 0
                for o in ("ignored", "accepted")
            )

        await wait_until(counted, 10, "the update counted")
        assert await stored(app) == 0, "another bot's command was taken as a turn"
