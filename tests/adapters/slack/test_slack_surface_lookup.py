"""What the Slack surface does after a post whose outcome is unclear (adapters/slack/):
the connection dropped, no answer. The thread is searched for the reply's key before the
post is sent again: a reply that landed is found (in a thread of weeks too: only the replies
since the unclear post are searched), and one the search cannot tell about (Slack refuses
it for a missing history scope, or it keeps failing) is sent again on the core's last try
(a second copy beats no answer at all), never lost.

One answer is recorded in a real SQLite store and delivered by the real deliverer through
a real SlackSurface (AsyncWebClient against the fake Slack Web API, its conversations.replies
paged as Slack pages it where a test says so); the deliverer's pauses are shortened, the
whole delivery bounded."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from fake_slack_api import FakeSlackApi
from slack_support import CHANNEL, TEAM, shorten_pauses, with_fake

from adapters.slack import lookup
from adapters.slack.lookup import LOOKUP_PAGES
from adapters.slack.surface import SlackSurface
from bridge.engine.delivery import Deliverer
from bridge.metrics import Metrics
from bridge.model import Inbound, Outgoing, ReplyKind, ReplyState, ReplyTarget
from bridge.store import NewReply, ReplyRecord, SqliteStore

THREAD_TS = "1764669600.000100"
OUTCOME_S = 20  # the deliverer's (shortened) tries all end well within this
ANSWER = "the answer of a long run"
PAGE = 200
WEEK_S = 7 * 24 * 3600


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    shorten_pauses(monkeypatch)


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
    await deliverer.settle()  # a sent mark on its way is on disk before the test reads it


def landed(fake: FakeSlackApi) -> list[dict[str, Any]]:
    """The copies of the answer in the thread."""
    return [m for m in fake.thread(CHANNEL, THREAD_TS) if ANSWER in str(m["text"])]


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


@with_fake(PagedSlack)
async def test_an_unclear_post_in_a_long_thread_is_found_not_posted_twice(
    store: SqliteStore,
    fake: FakeSlackApi,
    surface: SlackSurface,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lookup, "IN_FLIGHT_GRACE_S", 0.5)
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


class NoHistorySlack(FakeSlackApi):
    """An app granted no history scope: every search of a conversation is refused."""

    def _m_conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": False, "error": "missing_scope", "needed": "channels:history"}

    def _m_conversations_history(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": False, "error": "missing_scope", "needed": "channels:history"}


@with_fake(NoHistorySlack)
async def test_an_unclear_post_is_sent_again_when_slack_refuses_the_search(
    store: SqliteStore, fake: FakeSlackApi, surface: SlackSurface
) -> None:
    fake.fail("chat.postMessage", "drop")  # the first post: dropped before Slack posts it
    rec = await one_answer(store)
    await deliver_within(store, surface, rec, Metrics())
    copies = landed(fake)
    final = await store.get_reply(rec.id)
    assert final is not None
    assert len(copies) == 1, (
        f"the first post was dropped (nothing landed) and Slack refused the search "
        f"(missing_scope): the answer was posted {len(copies)} times, its reply is "
        f"{final.state.value} ({final.last_error})"
    )
    assert final.state is ReplyState.SENT


async def test_the_last_try_posts_when_the_search_keeps_failing(
    store: SqliteStore, fake: FakeSlackApi, surface: SlackSurface
) -> None:
    fake.fail("chat.postMessage", "drop")  # the first post: dropped before Slack posts it
    fake.fail("conversations.replies", "5xx", times=1_000_000)  # the search: down throughout
    rec = await one_answer(store)
    await deliver_within(store, surface, rec, Metrics())
    copies = landed(fake)
    final = await store.get_reply(rec.id)
    assert final is not None
    tries = [c.status for c in fake.calls if c.method == "chat.postMessage"]
    assert len(copies) == 1, (
        f"the search failed on every try and the core's last try was to post anyway: the "
        f"answer was posted {len(copies)} times in {OUTCOME_S}s (chat.postMessage "
        f"statuses {tries}; the reply is {final.state.value}, after {final.attempts} tries)"
    )
    assert final.state is ReplyState.SENT
