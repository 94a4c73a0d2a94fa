"""Review: when the search for an unclear post keeps failing, the core's last try posts.

After an unclear chat.postMessage (the connection dropped) the core asks the surface
(``find_sent``) before each new try; when the surface cannot tell (conversations.replies
fails: a 5xx outage of that one method, or a thread longer than the search reaches), the
core's rule is that its last try sends anyway ("a second copy beats no answer at all").
The surface's own ``send`` then searched once more by itself, failed the same way and
refused to post, so that last try never posted: the reply was retried every few minutes
for the hour of patience and then given up, an answer lost though the core had decided to
send it.

The real deliverer, SQLite store, SlackSurface and AsyncWebClient against the fake Slack
Web API; the deliverer's pauses are shortened and the wait for the outcome is bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from fake_slack_api import FakeSlackApi
from slack_sdk.web.async_client import AsyncWebClient
from slack_support import BOT_TOKEN

from adapters.slack.surface import SlackSurface
from bridge import delivery
from bridge.delivery import Deliverer
from bridge.metrics import Metrics
from bridge.model import Inbound, Outgoing, ReplyKind, ReplyState, ReplyTarget
from bridge.store import NewReply, SqliteStore

CHANNEL, THREAD_TS, TEAM = "C0CHAN0001", "1764669600.000100", "T0TEAM0001"
OUTCOME_S = 20  # the deliverer's (shortened) tries all end well within this


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery, "MAX_BACKOFF_S", 0.001)
    monkeypatch.setattr(delivery, "SLOW_BACKOFF_S", 0.01)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "bridge.db")
    await s.open()
    yield s
    await s.close()


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


async def test_the_last_try_posts_when_the_search_keeps_failing(
    store: SqliteStore, fake: FakeSlackApi, surface: SlackSurface
) -> None:
    fake.fail("chat.postMessage", "drop")  # the first post: dropped before Slack posts it
    fake.fail("conversations.replies", "5xx", times=1_000_000)  # the search: down throughout
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
    final = await store.get_reply(rec.id)
    assert final is not None
    tries = [c.status for c in fake.calls if c.method == "chat.postMessage"]
    assert len(landed) == 1, (
        f"the search failed on every try and the core's last try was to post anyway: the "
        f"answer was posted {len(landed)} times in {OUTCOME_S}s (chat.postMessage "
        f"statuses {tries}; the reply is {final.state.value}, after {final.attempts} tries)"
    )
    assert final.state is ReplyState.SENT
