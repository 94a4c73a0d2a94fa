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

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fake_slack_api import FakeSlackApi
from slack_support import APP_TOKEN, BOT_TOKEN
from unclear_post_support import (
    CHANNEL,
    THREAD_TS,
    deliver_within,
    landed,
    one_answer,
    shorten_pauses,
    slack_surface,
)

from adapters.slack import surface as slack_surface_module
from adapters.slack.surface import LOOKUP_PAGES, SlackSurface
from bridge.metrics import Metrics
from bridge.store import SqliteStore

PAGE = 200
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
    shorten_pauses(monkeypatch)
    monkeypatch.setattr(slack_surface_module, "IN_FLIGHT_GRACE_S", 0.5)


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
    async with slack_surface(fake) as s:
        yield s


async def test_an_unclear_post_in_a_long_thread_is_found_not_posted_twice(
    store: SqliteStore, fake: FakeSlackApi, surface: SlackSurface
) -> None:
    week_ago = int(time.time()) - WEEK_S
    for i in range(LOOKUP_PAGES * PAGE + 100):  # a week of a conversation in one thread
        ts = f"{week_ago + i * 60}.000100"
        earlier = {"type": "message", "ts": ts, "thread_ts": THREAD_TS, "text": f"earlier {i}"}
        fake.messages.setdefault(CHANNEL, []).append(earlier)
    fake.fail("chat.postMessage", "drop", commit=True)  # posted; the answer never came
    rec = await one_answer(store)
    metrics = Metrics()
    await deliver_within(store, surface, rec, metrics)
    copies = landed(fake)
    confirmed = metrics.registry.get_sample_value(
        "jazz_bridge_replies_total", {"surface": "slack", "result": "confirmed"}
    )
    assert len(copies) == 1, (
        f"the answer landed though its post's answer was lost, in a thread of "
        f"{len(fake.thread(CHANNEL, THREAD_TS))} messages: it was posted {len(copies)} times "
        f"(found by the search: {confirmed or 0:.0f})"
    )
    assert confirmed == 1
