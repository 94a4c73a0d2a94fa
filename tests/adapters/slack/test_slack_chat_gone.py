"""A Slack channel that takes no more of the bot's posts (archived, deleted, the bot removed).

Its refusal is a :class:`~bridge.ports.ChatGone`: the deliverer tells the core once (which
drops what the channel still had queued), gives up that conversation's later replies
without calling Slack again, and posts again once the channel writes again.

The real deliverer, SQLite store, SlackSurface and AsyncWebClient against the fake Slack
Web API; every wait bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from fake_slack_api import FakeSlackApi
from slack_sdk.web.async_client import AsyncWebClient
from slack_support import APP_TOKEN, BOT_TOKEN

from adapters.slack.surface import SlackSurface
from bridge.engine.delivery import Deliverer
from bridge.metrics import Metrics
from bridge.model import Inbound, Outgoing, ReplyKind, ReplyState, ReplyTarget
from bridge.store import NewReply, ReplyRecord, SqliteStore

CHANNEL, THREAD_TS, TEAM = "C0CHAN0001", "1764669600.000100", "T0TEAM0001"
KEY = f"slack:{TEAM}:{CHANNEL}:{THREAD_TS}"


class ClosingSlack(FakeSlackApi):
    """Slack refusing every post with ``code`` while ``gone`` holds."""

    def __init__(self, code: str) -> None:
        super().__init__(BOT_TOKEN, app_token=APP_TOKEN)
        self.code = code
        self.gone = True

    def _m_chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        if self.gone:
            return {"ok": False, "error": self.code}
        return super()._m_chat_postMessage(args)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "bridge.db")
    await s.open()
    yield s
    await s.close()


async def reply(store: SqliteStore, n: int) -> ReplyRecord:
    msg, _ = await store.accept(
        Inbound(platform="slack", event_id=f"Ev{n}", thread_key=KEY, sender_id="U1", text="hi"),
        home="slack-home",
        is_command=False,
    )
    target = ReplyTarget(
        surface="slack",
        thread_key=KEY,
        context={"team": TEAM, "channel": CHANNEL, "thread_ts": THREAD_TS},
    )
    (rec,) = await store.add_replies(
        [
            NewReply(
                f"answer:{msg.id}:0",
                msg.conversation_id,
                Outgoing(ReplyKind.ANSWER, f"answer {n}"),
                target,
                message_id=msg.id,
            )
        ]
    )
    return rec


async def bounded(coro: Any) -> Any:
    return await asyncio.wait_for(coro, timeout=10)


@pytest.mark.parametrize("code", ["is_archived", "channel_not_found", "not_in_channel"])
async def test_a_channel_gone_is_told_once_and_not_called_again_until_it_writes(
    store: SqliteStore, code: str
) -> None:
    fake = ClosingSlack(code)
    await fake.start()
    try:
        client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url, retry_handlers=[])
        async with aiohttp.ClientSession() as session:
            client.session = session
            surface = SlackSurface(client, BOT_TOKEN, api_url=fake.api_url, max_file_bytes=1024)
            told: list[tuple[int, str]] = []
            deliverer = Deliverer(
                store,
                {"slack": surface},
                Metrics(),
                lambda _: None,
                on_gone=lambda cid, why: told.append((cid, why)),
            )
            try:
                first, second = await reply(store, 1), await reply(store, 2)
                missed = await bounded(deliverer.deliver([first, second]))
                assert missed == {first.id, second.id}
                refused = fake.called("chat.postMessage", ok=False)
                assert len(refused) == 1  # the second was not tried: it would be refused too
                assert len(told) == 1 and told[0][0] == first.conversation_id
                assert code in told[0][1]
                for rec in (first, second):
                    got = await store.get_reply(rec.id)
                    assert got is not None and got.state is ReplyState.FAILED

                # the channel wrote again (unarchived, the bot invited back)
                fake.gone = False
                deliverer.reachable(first.conversation_id)
                third = await reply(store, 3)
                assert await bounded(deliverer.deliver([third])) == set()
                posted = fake.called("chat.postMessage")
                assert [c.args.get("text") or c.args.get("markdown_text") for c in posted] == [
                    "answer 3"
                ]
            finally:
                deliverer.closing = True
                await surface.close()
    finally:
        await fake.stop()
