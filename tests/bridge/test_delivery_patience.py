"""How long the deliverer keeps trying a reply through transient failures.

An answer the agent took minutes (and money) to make must survive a platform's half-minute
outage: transient failures are retried past the six quick tries, at a slow pace, until the
reply is ``PATIENCE_S`` old; only then (or at once for a permanent refusal) is it given up.
Before, the sixth transient failure (~31 s) marked it failed, and nothing sent it again,
not even a restart.

The real deliverer and SQLite store; a scripted surface fails its first sends. The pauses
between tries are shortened (1-300 s each otherwise).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.engine import delivery
from bridge.engine.delivery import Deliverer
from bridge.metrics import Metrics
from bridge.model import Inbound, Outgoing, ReplyKind, ReplyState, ReplyTarget
from bridge.ports import Capabilities, DeliveryError
from bridge.store import NewReply, ReplyRecord, SqliteStore


class FlakySurface:
    """Fails its first ``failures`` sends the way a platform that is down does."""

    name = "flaky"

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.tries = 0
        self.landed: list[str] = []
        self.capabilities = Capabilities()

    async def send(self, target: ReplyTarget, message: Outgoing, *, reply_key: str) -> str:
        self.tries += 1
        if self.tries <= self.failures:
            raise self.error
        self.landed.append(message.text)
        return f"ref-{self.tries}"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "bridge.db")
    await s.open()
    yield s
    await s.close()


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery, "MAX_BACKOFF_S", 0.001)
    monkeypatch.setattr(delivery, "SLOW_BACKOFF_S", 0.001)


async def one_reply(store: SqliteStore) -> ReplyRecord:
    inbound = Inbound(
        platform="flaky", event_id="e1", thread_key="flaky:t", sender_id="u", text="hi"
    )
    msg, _ = await store.accept(inbound, home="flaky-t", is_command=False)
    target = ReplyTarget(surface="flaky", thread_key="flaky:t", context={})
    out = Outgoing(ReplyKind.ANSWER, "the report, summarised")
    (rec,) = await store.add_replies([NewReply("answer:1:0", msg.conversation_id, out, target)])
    return rec


@pytest.mark.parametrize(
    "error",
    [DeliveryError("flaky: 502 from the platform"), OSError("flaky: connection refused")],
    ids=["platform-5xx", "network"],
)
async def test_an_answer_outlasts_an_outage_longer_than_the_quick_tries(
    store: SqliteStore, error: Exception
) -> None:
    failures = delivery.MAX_ATTEMPTS + 4
    surface = FlakySurface(failures, error)
    deliverer = Deliverer(store, {"flaky": surface}, Metrics(), lambda _: None)
    rec = await one_reply(store)
    assert await deliverer.deliver([rec]) == set(), "the answer was given up"
    assert surface.landed == ["the report, summarised"]
    assert surface.tries == failures + 1
    sent = await store.get_reply(rec.id)
    assert sent is not None and sent.state is ReplyState.SENT


async def test_a_reply_refused_past_its_patience_is_given_up(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure that does not pass is given up once the reply is PATIENCE_S old (here at
    once), after the quick tries: the conversation's later replies are not held for ever."""
    monkeypatch.setattr(delivery, "PATIENCE_S", 0.0)
    surface = FlakySurface(10_000, DeliveryError("flaky: 500 for this reply, always"))
    deliverer = Deliverer(store, {"flaky": surface}, Metrics(), lambda _: None)
    rec = await one_reply(store)
    assert await deliverer.deliver([rec]) == {rec.id}
    assert surface.tries == delivery.MAX_ATTEMPTS
    failed = await store.get_reply(rec.id)
    assert failed is not None and failed.state is ReplyState.FAILED
    assert failed.last_error == "flaky: 500 for this reply, always"


async def test_a_permanent_refusal_is_given_up_at_once(store: SqliteStore) -> None:
    surface = FlakySurface(10_000, DeliveryError("flaky: channel_not_found", permanent=True))
    deliverer = Deliverer(store, {"flaky": surface}, Metrics(), lambda _: None)
    rec = await one_reply(store)
    assert await deliverer.deliver([rec]) == {rec.id}
    assert surface.tries == 1
    failed = await store.get_reply(rec.id)
    assert failed is not None and failed.state is ReplyState.FAILED
