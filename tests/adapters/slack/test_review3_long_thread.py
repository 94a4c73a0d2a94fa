"""Review: an unclear post in a long thread is found, not posted twice.

After an unclear chat.postMessage the thread is searched for the reply's key, with
conversations.replies: oldest first, 200 a page, at most LOOKUP_PAGES pages. In a thread
longer than that (a conversation kept going for weeks in one thread), the reply, which
is among the newest, was never reached: "cannot tell", and the core's last try posted it
again, though it had landed: the person got the answer twice. The surface knows when it
made the unclear post, so it searches only the replies since then (``oldest``).

The real deliverer, SQLite store, SlackSurface and AsyncWebClient against the fake Slack
Web API (its conversations.replies paged as Slack pages it); pauses shortened, waits bounded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from fake_slack_api import FakeSlackApi
from slack_sdk.web.async_client import AsyncWebClient
from slack_support import APP_TOKEN, BOT_TOKEN

from adapters.slack import surface as slack_surface
from adapters.slack.surface import LOOKUP_PAGES, SlackSurface
from bridge import delivery
from bridge.delivery import Deliverer
from bridge.metrics import Metrics
from bridge.model import Inbound, Outgoing, ReplyKind, ReplyTarget
from bridge.store import NewReply, SqliteStore

CHANNEL, THREAD_TS, TEAM = "C0CHAN0001", "1764669600.000100", "T0TEAM0001"
PAGE = 200
OUTCOME_S = 20
WEEK_S = 7 * 24 * 3600


class PagedSlack(FakeSlackApi):
    """conversations.replies as Slack serves it: oldest first, ``limit`` a page, a cursor,
    and ``oldest`` (only messages after that time)."""

    def _m_conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        found = self._with_all(str(args.get("channel")), str(args.get("ts")))
        oldest = float(str(args.get("oldest") or 0))
        found = [m for m in found if float(m["ts"]) > oldest]
        start = int(str(args.get("cursor") or 0))
        limit = int(str(args.get("limit") or 100))
        page = found[start : start + limit]
        more = start + limit < len(found)
        return {
            "ok": True,
            "messages": page,
            "has_more": more,
            "response_metadata": {"next_cursor": str(start + limit) if more else ""},
        }

    def _with_all(self, channel: str, ts: str) -> list[dict[str, Any]]:
        return self.thread(channel, ts)  # metadata included: the surface always asks for it


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery, "MAX_BACKOFF_S", 0.001)
    monkeypatch.setattr(delivery, "SLOW_BACKOFF_S", 0.01)
    monkeypatch.setattr(slack_surface, "IN_FLIGHT_GRACE_S", 0.5)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "bridge.db")
    await s.open()
    yield s
    await s.close()


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlackApi]:
    api = PagedSlack(BOT_TOKEN, app_token=APP_TOKEN)
    await api.start()
    yield api
    await api.stop()


@pytest.fixture
async def surface(fake: FakeSlackApi) -> AsyncIterator[SlackSurface]:
    client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url, retry_handlers=[])
    async with aiohttp.ClientSession() as session:
        client.session = session
        s = SlackSurface(client, BOT_TOKEN, api_url=fake.api_url, max_file_bytes=1024)
        try:
            yield s
        finally:
            await s.close()


async def test_an_unclear_post_in_a_long_thread_is_found_not_posted_twice(
    store: SqliteStore, fake: FakeSlackApi, surface: SlackSurface
) -> None:
    week_ago = int(time.time()) - WEEK_S
    for i in range(LOOKUP_PAGES * PAGE + 100):  # a week of a conversation in one thread
        ts = f"{week_ago + i * 60}.000100"
        earlier = {"type": "message", "ts": ts, "thread_ts": THREAD_TS, "text": f"earlier {i}"}
        fake.messages.setdefault(CHANNEL, []).append(earlier)
    fake.fail("chat.postMessage", "drop", commit=True)  # posted; the answer never came
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
    answer = Outgoing(ReplyKind.ANSWER, "the answer of a long run")
    (rec,) = await store.add_replies(
        [NewReply(f"answer:{msg.id}:0", msg.conversation_id, answer, target)]
    )
    metrics = Metrics()
    deliverer = Deliverer(store, {"slack": surface}, metrics, lambda _: None)
    task = asyncio.ensure_future(deliverer.deliver([rec]))
    done, _ = await asyncio.wait({task}, timeout=OUTCOME_S)
    deliverer.closing = True
    if not done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    landed = [m for m in fake.thread(CHANNEL, THREAD_TS) if "long run" in str(m["text"])]
    confirmed = metrics.registry.get_sample_value(
        "jazz_bridge_replies_total", {"surface": "slack", "result": "confirmed"}
    )
    assert len(landed) == 1, (
        f"the answer landed though its post's answer was lost, in a thread of "
        f"{len(fake.thread(CHANNEL, THREAD_TS))} messages: it was posted {len(landed)} times "
        f"(found by the search: {confirmed or 0:.0f})"
    )
    assert confirmed == 1
