"""Review: a post whose outcome is unclear must not be lost because Slack will not search.

After an unclear chat.postMessage (the connection dropped, no answer) the thread is searched
for the reply's key before it is sent again. That search needs the history scopes
(conversations.replies/history); a workspace whose admins granted the app only
``app_mentions:read`` and ``chat:write`` (history scopes let a bot read every message of a
channel, which admins often refuse) answers it ``missing_scope``, for good. The surface
passed that on as a permanent delivery failure, so the answer (a run of minutes, maybe)
was recorded as failed and never posted, though nothing had landed: one dropped
connection lost the whole answer. "Cannot tell whether it landed" must end as the core
says, in a resend (a second copy beats no answer at all), not in silence.

The real deliverer, SQLite store, SlackSurface and AsyncWebClient, against the fake Slack
Web API; the deliverer's pauses are shortened and the wait for the outcome is bounded.
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
from bridge import delivery
from bridge.delivery import Deliverer
from bridge.metrics import Metrics
from bridge.model import Inbound, Outgoing, ReplyKind, ReplyState, ReplyTarget
from bridge.store import NewReply, SqliteStore

CHANNEL, THREAD_TS, TEAM = "C0CHAN0001", "1764669600.000100", "T0TEAM0001"
OUTCOME_S = 20  # the deliverer's (shortened) tries all end well within this


class NoHistorySlack(FakeSlackApi):
    """An app granted no history scope: every search of a conversation is refused."""

    def _m_conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": False, "error": "missing_scope", "needed": "channels:history"}

    def _m_conversations_history(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": False, "error": "missing_scope", "needed": "channels:history"}


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
async def fake() -> AsyncIterator[FakeSlackApi]:
    api = NoHistorySlack(BOT_TOKEN, app_token=APP_TOKEN)
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


async def test_an_unclear_post_is_sent_again_when_slack_refuses_the_search(
    store: SqliteStore, fake: FakeSlackApi, surface: SlackSurface
) -> None:
    fake.fail("chat.postMessage", "drop")  # the first post: dropped before Slack posts it
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
    deliverer = Deliverer(store, {"slack": surface}, Metrics(), lambda _: None)
    task = asyncio.ensure_future(deliverer.deliver([rec]))
    done, _ = await asyncio.wait({task}, timeout=OUTCOME_S)
    deliverer.closing = True
    if not done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    landed = [m for m in fake.thread(CHANNEL, THREAD_TS) if "long run" in str(m["text"])]
    final = await store.get_reply(rec.id)
    assert final is not None
    assert len(landed) == 1, (
        f"the first post was dropped (nothing landed) and Slack refused the search "
        f"(missing_scope): the answer was posted {len(landed)} times, its reply is "
        f"{final.state.value} ({final.last_error})"
    )
    assert final.state is ReplyState.SENT
