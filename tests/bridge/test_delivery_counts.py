"""The deliverer's count of resends that may show twice (``resent_unconfirmed``).

A scripted surface lands some sends without answering (the platform did the work, the
answer was lost), refuses others (429) and, where it can look replies up, fails to tell:
every copy that reaches the chat beyond the first must be one the metric counted, and a
refused try is no copy at all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.engine import delivery
from bridge.engine.delivery import Deliverer
from bridge.metrics import Metrics
from bridge.model import Inbound, Outgoing, ReplyKind, ReplyTarget
from bridge.ports import Capabilities, DeliveryError
from bridge.store import NewReply, ReplyRecord, SqliteStore


class ScriptedSurface:
    """Plays one step per send: "lost" (lands, the answer never comes), "429", "ok"."""

    name = "scripted"

    def __init__(self, steps: list[str], *, confirms: bool) -> None:
        self.steps = steps
        self.landed: list[str] = []
        self.capabilities = Capabilities(confirm_delivery=confirms)

    async def send(self, target: ReplyTarget, message: Outgoing, *, reply_key: str) -> str:
        step = self.steps.pop(0) if self.steps else "ok"
        if step == "429":
            raise DeliveryError("scripted: rate limited", retry_after=0.01)
        self.landed.append(reply_key)
        if step == "lost":
            raise TimeoutError("scripted: the answer never came")
        return reply_key

    async def find_sent(self, target: ReplyTarget, reply_key: str) -> str | None:
        raise TimeoutError("scripted: the lookup cannot tell")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "bridge.db")
    await s.open()
    yield s
    await s.close()


async def one_reply(store: SqliteStore) -> ReplyRecord:
    inbound = Inbound(
        platform="scripted", event_id="e1", thread_key="scripted:t", sender_id="u", text="hi"
    )
    msg, _ = await store.accept(inbound, home="scripted-t", is_command=False)
    target = ReplyTarget(surface="scripted", thread_key="scripted:t", context={})
    (rec,) = await store.add_replies(
        [NewReply("answer:1:0", msg.conversation_id, Outgoing(ReplyKind.ANSWER, "hello"), target)]
    )
    return rec


def resent(metrics: Metrics) -> float:
    value = metrics.registry.get_sample_value(
        "jazz_bridge_replies_total", {"surface": "scripted", "result": "resent_unconfirmed"}
    )
    return value or 0.0


async def test_a_refused_resend_is_not_counted_as_a_copy(store: SqliteStore) -> None:
    surface = ScriptedSurface(["lost", "429", "ok"], confirms=False)
    metrics = Metrics()
    deliverer = Deliverer(store, {"scripted": surface}, metrics, lambda _: None)
    assert await deliverer.deliver([await one_reply(store)]) == set()  # none missed
    assert len(surface.landed) == 2  # one extra copy in the chat
    assert resent(metrics) == 1  # counted once, though the 429 made it try twice


async def test_a_blind_resend_where_the_lookup_cannot_tell_is_counted(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # only the pauses between the six tries are shortened (1-30 s each otherwise)
    monkeypatch.setattr(delivery, "MAX_BACKOFF_S", 0.01)
    surface = ScriptedSurface(["lost"], confirms=True)
    metrics = Metrics()
    deliverer = Deliverer(store, {"scripted": surface}, metrics, lambda _: None)
    assert await deliverer.deliver([await one_reply(store)]) == set()  # none missed
    assert len(surface.landed) == 2  # the last try, unable to look, sent it again
    assert resent(metrics) == len(surface.landed) - 1
