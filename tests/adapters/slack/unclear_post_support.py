"""What the tests of an unclear Slack post share: one answer recorded in a real SQLite
store, delivered by the real deliverer through a real SlackSurface (AsyncWebClient against
the fake Slack Web API), the deliverer's pauses shortened and the whole delivery bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from fake_slack_api import FakeSlackApi
from slack_sdk.web.async_client import AsyncWebClient
from slack_support import BOT_TOKEN

from adapters.slack.surface import SlackSurface
from bridge.engine import delivery
from bridge.engine.delivery import Deliverer
from bridge.metrics import Metrics
from bridge.model import Inbound, Outgoing, ReplyKind, ReplyTarget
from bridge.store import NewReply, ReplyRecord, SqliteStore

CHANNEL, THREAD_TS, TEAM = "C0CHAN0001", "1764669600.000100", "T0TEAM0001"
OUTCOME_S = 20  # the deliverer's (shortened) tries all end well within this
ANSWER = "the answer of a long run"


def shorten_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery, "MAX_BACKOFF_S", 0.001)
    monkeypatch.setattr(delivery, "SLOW_BACKOFF_S", 0.01)


@asynccontextmanager
async def slack_surface(fake: FakeSlackApi) -> AsyncIterator[SlackSurface]:
    client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url, retry_handlers=[])
    async with aiohttp.ClientSession() as session:
        client.session = session
        surface = SlackSurface(client, BOT_TOKEN, api_url=fake.api_url, max_file_bytes=1024)
        try:
            yield surface
        finally:
            await surface.close()


async def one_answer(store: SqliteStore) -> ReplyRecord:
    """An answer to a message in the thread, recorded and not yet sent."""
    key = f"slack:{TEAM}:{CHANNEL}:{THREAD_TS}"
    msg, _ = await store.accept(
        Inbound(platform="slack", event_id="Ev1", thread_key=key, sender_id="U1", text="hi"),
        home="slack-home",
        is_command=False,
    )
    target = ReplyTarget(
        surface="slack",
        thread_key=key,
        context={"team": TEAM, "channel": CHANNEL, "thread_ts": THREAD_TS},
    )
    answer = Outgoing(ReplyKind.ANSWER, ANSWER)
    (rec,) = await store.add_replies(
        [NewReply(f"answer:{msg.id}:0", msg.conversation_id, answer, target)]
    )
    return rec


async def deliver_within(
    store: SqliteStore, surface: SlackSurface, rec: ReplyRecord, metrics: Metrics
) -> None:
    """Deliver ``rec`` for at most ``OUTCOME_S``; then stop trying, whatever came of it."""
    deliverer = Deliverer(store, {"slack": surface}, metrics, lambda _: None)
    task = asyncio.ensure_future(deliverer.deliver([rec]))
    done, _ = await asyncio.wait({task}, timeout=OUTCOME_S)
    deliverer.closing = True
    if not done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def landed(fake: FakeSlackApi) -> list[dict[str, Any]]:
    """The copies of the answer in the thread."""
    return [m for m in fake.thread(CHANNEL, THREAD_TS) if ANSWER in str(m["text"])]
