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

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fake_slack_api import FakeSlackApi
from unclear_post_support import (
    OUTCOME_S,
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
async def surface(fake: FakeSlackApi) -> AsyncIterator[SlackSurface]:
    async with slack_surface(fake) as s:
        yield s


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
