"""The deliverer (``bridge/engine/delivery.py``): how long it keeps trying a reply, which
resends it counts, and what a surface's own bug costs.

The real deliverer and SQLite store; surfaces of the tests' own fail their sends as told.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.engine import delivery
from bridge.engine.delivery import Deliverer
from bridge.metrics import Metrics
from bridge.model import Inbound, Outgoing, ReplyKind, ReplyState, ReplyTarget
from bridge.ports import Capabilities, DeliveryError
from bridge.store import NewReply, ReplyRecord, SqliteStore
from bridge.store.sqlite import core as sqlite_core


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "bridge.db")
    await s.open()
    yield s
    await s.close()


async def one_reply(store: SqliteStore, surface: str, text: str) -> ReplyRecord:
    """One answer in ``surface``'s thread, recorded and waiting to be delivered."""
    inbound = Inbound(
        platform=surface, event_id="e1", thread_key=f"{surface}:t", sender_id="u", text="hi"
    )
    msg, _ = await store.accept(inbound, home=f"{surface}-t", is_command=False)
    target = ReplyTarget(surface=surface, thread_key=f"{surface}:t", context={})
    out = Outgoing(ReplyKind.ANSWER, text)
    (rec,) = await store.add_replies([NewReply("answer:1:0", msg.conversation_id, out, target)])
    return rec


# -- patience: how long a reply is tried through transient failures -------------------------
#
# An answer the agent took minutes (and money) to make must survive a platform's half-minute
# outage: transient failures are retried past the six quick tries, at a slow pace, until the
# reply is ``PATIENCE_S`` old; only then (or at once for a permanent refusal) is it given up.
# Before, the sixth transient failure (~31 s) marked it failed, and nothing sent it again,
# not even a restart. The pauses between tries are shortened (1-300 s each otherwise).


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
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery, "MAX_BACKOFF_S", 0.001)
    monkeypatch.setattr(delivery, "SLOW_BACKOFF_S", 0.001)


@pytest.mark.usefixtures("quick")
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
    rec = await one_reply(store, "flaky", "the report, summarised")
    assert await deliverer.deliver([rec]) == set(), "the answer was given up"
    assert surface.landed == ["the report, summarised"]
    assert surface.tries == failures + 1
    await deliverer.settle()  # its sent mark, written with the store's next write
    sent = await store.get_reply(rec.id)
    assert sent is not None and sent.state is ReplyState.SENT


@pytest.mark.usefixtures("quick")
async def test_a_reply_refused_past_its_patience_is_given_up(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure that does not pass is given up once the reply is PATIENCE_S old (here at
    once), after the quick tries: the conversation's later replies are not held for ever."""
    monkeypatch.setattr(delivery, "PATIENCE_S", 0.0)
    surface = FlakySurface(10_000, DeliveryError("flaky: 500 for this reply, always"))
    deliverer = Deliverer(store, {"flaky": surface}, Metrics(), lambda _: None)
    rec = await one_reply(store, "flaky", "the report, summarised")
    assert await deliverer.deliver([rec]) == {rec.id}
    assert surface.tries == delivery.MAX_ATTEMPTS
    failed = await store.get_reply(rec.id)
    assert failed is not None and failed.state is ReplyState.FAILED
    assert failed.last_error == "flaky: 500 for this reply, always"


@pytest.mark.usefixtures("quick")
async def test_a_permanent_refusal_is_given_up_at_once(store: SqliteStore) -> None:
    surface = FlakySurface(10_000, DeliveryError("flaky: channel_not_found", permanent=True))
    deliverer = Deliverer(store, {"flaky": surface}, Metrics(), lambda _: None)
    rec = await one_reply(store, "flaky", "the report, summarised")
    assert await deliverer.deliver([rec]) == {rec.id}
    assert surface.tries == 1
    failed = await store.get_reply(rec.id)
    assert failed is not None and failed.state is ReplyState.FAILED


# -- the count of resends that may show twice (``resent_unconfirmed``) -----------------------
#
# A scripted surface lands some sends without answering (the platform did the work, the
# answer was lost), refuses others (429) and, where it can look replies up, fails to tell:
# every copy that reaches the chat beyond the first must be one the metric counted, and a
# refused try is no copy at all.


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


def resent(metrics: Metrics) -> float:
    value = metrics.registry.get_sample_value(
        "jazz_bridge_replies_total", {"surface": "scripted", "result": "resent_unconfirmed"}
    )
    return value or 0.0


async def test_a_refused_resend_is_not_counted_as_a_copy(store: SqliteStore) -> None:
    surface = ScriptedSurface(["lost", "429", "ok"], confirms=False)
    metrics = Metrics()
    deliverer = Deliverer(store, {"scripted": surface}, metrics, lambda _: None)
    rec = await one_reply(store, "scripted", "hello")
    assert await deliverer.deliver([rec]) == set()  # none missed
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
    rec = await one_reply(store, "scripted", "hello")
    assert await deliverer.deliver([rec]) == set()  # none missed
    assert len(surface.landed) == 2  # the last try, unable to look, sent it again
    assert resent(metrics) == len(surface.landed) - 1


# -- a surface's own bug ---------------------------------------------------------------------


class BuggySurface:
    """Its renderer chokes on one reply's text (as a surface bug would, every time)."""

    name = "buggy"

    def __init__(self) -> None:
        self.capabilities = Capabilities()
        self.landed: list[str] = []

    async def send(self, target: ReplyTarget, message: Outgoing, *, reply_key: str) -> str:
        if "choke" in message.text:
            raise ValueError("the renderer choked")
        self.landed.append(message.text)
        return f"ref-{len(self.landed)}"


async def test_a_surface_bug_fails_one_reply_and_the_next_still_goes(store: SqliteStore) -> None:
    """A surface that raises something no one expected (a bug of its own, not a platform's
    answer) gives up that one reply and lets the conversation's later replies through.

    Before, only ``DeliveryError``, ``OSError`` and ``TimeoutError`` were caught: any other
    exception escaped the deliverer, the reply stayed ``pending`` and every later reply of
    the conversation, queued behind it, was never sent."""
    inbound = Inbound(
        platform="buggy", event_id="e1", thread_key="buggy:t", sender_id="u", text="hi"
    )
    msg, _ = await store.accept(inbound, home="buggy-t", is_command=False)
    target = ReplyTarget(surface="buggy", thread_key="buggy:t", context={})
    first, second = await store.add_replies(
        [
            NewReply(
                "answer:1:0", msg.conversation_id, Outgoing(ReplyKind.ANSWER, "choke"), target
            ),
            NewReply("answer:1:1", msg.conversation_id, Outgoing(ReplyKind.ANSWER, "fine"), target),
        ]
    )
    surface = BuggySurface()
    deliverer = Deliverer(store, {"buggy": surface}, Metrics(), lambda _: None)
    missed = await deliverer.deliver([first, second])
    assert missed == {first.id}
    assert surface.landed == ["fine"], "the reply after the one the surface choked on"
    failed = await store.get_reply(first.id)
    assert failed is not None and failed.state is ReplyState.FAILED
    assert failed.last_error is not None and "renderer choked" in failed.last_error


# -- the sent mark of a delivery's last reply ----------------------------------------------
#
# It is not waited for by the turn: it shares the commit of the store's next write (the
# next message's intake, in a conversation answered one message at a time), so an answer
# costs one commit fewer. The conversation's next delivery waits for it, and settle()
# writes it before the store closes.


class LandingSurface:
    """Takes every send; the store's state of the reply is noted at each send."""

    name = "landing"

    def __init__(self, store: SqliteStore) -> None:
        self.store = store
        self.capabilities = Capabilities()
        self.landed: list[str] = []

    async def send(self, target: ReplyTarget, message: Outgoing, *, reply_key: str) -> str:
        self.landed.append(message.text)
        return f"ref-{len(self.landed)}"


async def test_the_last_sent_mark_rides_on_the_next_write_and_is_kept_in_order(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a mark waits this long for another write: past any pause of a loaded machine here
    monkeypatch.setattr(sqlite_core, "SOON_S", 60.0)
    surface = LandingSurface(store)
    deliverer = Deliverer(store, {"landing": surface}, Metrics(), lambda _: None)
    first = await one_reply(store, "landing", "first answer")
    before = store.stats.commits
    assert await deliverer.deliver([first]) == set()
    assert store.stats.commits == before, "the mark made a commit of its own"
    target = ReplyTarget(surface="landing", thread_key="landing:t", context={})
    (second,) = await store.add_replies(  # the next write: the mark shares its commit
        [NewReply("answer:2:0", first.conversation_id, Outgoing(ReplyKind.ANSWER, "2"), target)]
    )
    assert store.stats.commits == before + 1
    marked = await store.get_reply(first.id)
    assert marked is not None and marked.state is ReplyState.SENT
    assert marked.platform_ref == "ref-1"
    assert await deliverer.deliver([second]) == set()
    assert surface.landed == ["first answer", "2"]
    settling = asyncio.ensure_future(deliverer.settle())
    await store.close()  # the mark still waiting for a write to share is written first
    await asyncio.wait_for(settling, timeout=10)
