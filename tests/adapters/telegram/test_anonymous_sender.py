"""A message sent to the bot anonymously (a group admin with "Remain anonymous") or as a
channel is not a turn, but its sender is told why, instead of waiting for an answer that
never comes; one not addressed to the bot, or a channel's automatic forward, gets nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from tg_support import (
    BOT_NAME,
    GROUP,
    GROUP_CHAT,
    FakeBotApi,
    post,
    running_gateway,
    sample,
    stored,
    wait_sent,
    wait_until,
)

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")

ANONYMOUS_ADMIN = {
    "id": 1087968824,
    "is_bot": True,
    "first_name": "Group",
    "username": "GroupAnonymousBot",
}
CHANNEL = {"id": -1005550002222, "title": "Acme news", "type": "channel"}
CHANNEL_BOT = {"id": 136817688, "is_bot": True, "first_name": "Channel", "username": "Channel_Bot"}


def sent_as(
    update_id: int, sender: dict[str, Any], sender_chat: dict[str, Any], text: str, **extra: Any
) -> dict[str, Any]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id % 100000,
            "from": sender,
            "sender_chat": sender_chat,
            "chat": GROUP_CHAT,
            "date": 1764669660,
            "text": text,
            **extra,
        },
    }


def mentioning(text: str) -> dict[str, Any]:
    return {"entities": [{"offset": 0, "length": len(BOT_NAME) + 1, "type": "mention"}]}


async def test_an_anonymous_or_channel_sender_is_told_why_there_is_no_answer(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env) as (app, _client):
        ask = f"@{BOT_NAME} what is our uptime?"
        anonymous = sent_as(730009300, ANONYMOUS_ADMIN, GROUP_CHAT, ask, **mentioning(ask))
        assert await post(app.port, anonymous) == 200
        (told,) = await wait_sent(fake, GROUP, "anonymously")
        assert told.params["reply_parameters"]["message_id"] == 9300

        as_channel = sent_as(730009301, CHANNEL_BOT, CHANNEL, ask, **mentioning(ask))
        assert await post(app.port, as_channel) == 200
        await wait_sent(fake, GROUP, "anonymously", count=2)

        # not addressed to the bot: nothing said
        chatter = sent_as(730009302, ANONYMOUS_ADMIN, GROUP_CHAT, "meeting at 3")
        assert await post(app.port, chatter) == 200
        labels = {"platform": "telegram", "outcome": "ignored"}
        await wait_until(
            lambda: sample(app, "jazz_bridge_messages_total", **labels) == 3, 10, "all counted"
        )
        assert await stored(app) == 0, "a message on behalf of a chat was taken as a turn"
        said = [c for c in fake.called("sendMessage") if int(c.params["chat_id"]) == GROUP]
        assert len(said) == 2, said
