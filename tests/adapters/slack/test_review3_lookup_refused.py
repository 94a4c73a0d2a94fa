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

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fake_slack_api import FakeSlackApi
from slack_support import APP_TOKEN, BOT_TOKEN
from unclear_post_support import (
    deliver_within,
    landed,
    one_answer,
    shorten_pauses,
    slack_surface,
)

from adapters.slack.surface import SlackSurface
from bridge.metrics import Metrics
from bridge.model import ReplyState
from bridge.store import SqliteStore


class NoHistorySlack(FakeSlackApi):
    """An app granted no history scope: every search of a conversation is refused."""

    def _m_conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": False, "error": "missing_scope", "needed": "channels:history"}

    def _m_conversations_history(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": False, "error": "missing_scope", "needed": "channels:history"}


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    shorten_pauses(monkeypatch)


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
    async with slack_surface(fake) as s:
        yield s


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
