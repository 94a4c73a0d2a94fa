"""The store contract, turns: a run started and finished with its outcome, its message's
state and its replies in one transaction (all or nothing), a message answered without a
run, the parts of a message closed with it, and the spend of finished runs."""

from __future__ import annotations

import time

import pytest
from store_support import inbound, reply

from bridge.model import (
    InboxState,
    ReplyKind,
    ReplyState,
)
from bridge.store import RunOutcome, Store, StoreError


async def test_run_lifecycle(store: Store) -> None:
    m1, _ = await store.accept(inbound("ev1"), home="h", is_command=False)
    m2, _ = await store.accept(inbound("ev2"), home="h", is_command=False)
    cid = m1.conversation_id
    assert await store.count_in_state(cid, InboxState.ACCEPTED) == 2
    assert [m.id for m in await store.messages_in_state(InboxState.ACCEPTED)] == [m1.id, m2.id]

    run = await store.start_run(m1.id, "U1", 1)
    assert run.outcome is None and run.finished_at is None
    running = await store.get_message(m1.id)
    assert running is not None
    assert running.state is InboxState.RUNNING and running.started_at is not None
    assert await store.count_in_state(cid, InboxState.RUNNING) == 1
    assert (await store.runs(cid))[0].outcome is None

    outcome = RunOutcome(
        ok=True,
        exit_code=0,
        envelope_code=None,
        cost_usd=0.25,
        cost_known=True,
        prompt_tokens=10,
        completion_tokens=5,
        total_tokens=15,
        duration_ms=1200,
        tool_count=2,
    )
    recs = await store.finish_run(
        run.id, outcome, InboxState.DONE, [reply("r1", cid, message_id=m1.id)]
    )
    assert [r.state for r in recs] == [ReplyState.PENDING]
    done = await store.get_message(m1.id)
    assert done is not None and done.state is InboxState.DONE and done.finished_at is not None
    [finished] = await store.runs(cid)
    assert finished.outcome == outcome
    assert finished.finished_at is not None and finished.requester == "U1"

    run2 = await store.start_run(m2.id, "U1", 1)
    assert [r.id for r in await store.runs(cid)] == [run2.id, run.id]  # newest first
    assert [r.id for r in await store.runs(cid, limit=1)] == [run2.id]

    await store.complete_message(m2.id, InboxState.INTERRUPTED, [], error="crashed")
    m2_after = await store.get_message(m2.id)
    assert m2_after is not None
    assert m2_after.state is InboxState.INTERRUPTED and m2_after.error == "crashed"

    await store.redact_message(m1.id)
    redacted = await store.get_message(m1.id)
    assert redacted is not None and redacted.text == "[redacted]"


async def test_a_run_a_person_stopped_keeps_who_stopped_it_and_how(store: Store) -> None:
    """``RunOutcome.stopped_by`` ("Ada (Stop button)") is kept with the run; a run nobody
    stopped has None."""
    m1, _ = await store.accept(inbound("ev1"), home="h", is_command=False)
    m2, _ = await store.accept(inbound("ev2"), home="h", is_command=False)
    stopped = RunOutcome(
        ok=False,
        exit_code=None,
        envelope_code="interrupted",
        error="interrupted by SIGTERM",
        stopped_by="Ada (Stop button)",
    )
    run = await store.start_run(m1.id, "U1", 1)
    await store.finish_run(run.id, stopped, InboxState.FAILED, [])
    other = await store.start_run(m2.id, "U1", 1)
    await store.finish_run(other.id, RunOutcome(False, 1, "failed"), InboxState.FAILED, [])
    by_id = {r.id: r.outcome for r in await store.runs(m1.conversation_id)}
    assert by_id[run.id] == stopped
    assert by_id[other.id] is not None and by_id[other.id].stopped_by is None


async def test_complete_message_records_replies(store: Store) -> None:
    m, _ = await store.accept(inbound("cmd"), home="h", is_command=True)
    recs = await store.complete_message(
        m.id, InboxState.DONE, [reply("help", m.conversation_id, kind=ReplyKind.NOTICE)]
    )
    assert [r.dedupe_key for r in recs] == ["help"]
    assert recs[0].outgoing.kind is ReplyKind.NOTICE
    with pytest.raises(StoreError):
        await store.complete_message(9999, InboxState.DONE, [])


async def test_finish_run_is_atomic(store: Store) -> None:
    m, _ = await store.accept(inbound("ev1"), home="h", is_command=False)
    run = await store.start_run(m.id, "U1", 1)
    bad = [reply("ok", m.conversation_id), reply("bad", 9999)]  # no conversation 9999
    with pytest.raises(StoreError):
        await store.finish_run(run.id, RunOutcome(True, 0, None), InboxState.DONE, bad)
    [still] = await store.runs(m.conversation_id)
    assert still.outcome is None and still.finished_at is None
    msg = await store.get_message(m.id)
    assert msg is not None and msg.state is InboxState.RUNNING and msg.finished_at is None
    assert await store.undelivered_replies() == []


async def test_the_parts_of_a_message_close_with_its_run_start_or_its_answer(
    store: Store,
) -> None:
    """A message delivered in parts (an album) keeps its part_of; the run of its first part
    closes the others as merged in the same write (a crash after it leaves no part to run
    alone), and so does an answer without a run (a refusal); a part that is no longer
    accepted is left as it is."""
    a, _ = await store.accept(inbound("p1", part_of="album-1"), home="h", is_command=False)
    b, _ = await store.accept(inbound("p2", part_of="album-1"), home="h", is_command=False)
    c, _ = await store.accept(inbound("p3", part_of="album-1"), home="h", is_command=False)
    assert (a.part_of, b.part_of) == ("album-1", "album-1")
    await store.complete_message(c.id, InboxState.FAILED, [])  # answered on its own before
    run = await store.begin_run(a.id, "U1", parts=(b.id, c.id))
    assert run is not None and run.message_id == a.id
    states = {m.id: m.state for m in [await store.get_message(i) for i in (a.id, b.id, c.id)] if m}
    assert states == {a.id: InboxState.RUNNING, b.id: InboxState.MERGED, c.id: InboxState.FAILED}
    assert await store.messages_in_state(InboxState.ACCEPTED) == []
    d, _ = await store.accept(inbound("p4", part_of="album-2"), home="h", is_command=False)
    e, _ = await store.accept(inbound("p5", part_of="album-2"), home="h", is_command=False)
    await store.complete_message(
        d.id, InboxState.FAILED, [reply("budget", d.conversation_id)], parts=(e.id,)
    )
    merged = await store.get_message(e.id)
    assert merged is not None and merged.state is InboxState.MERGED
    # answered parts are pruned with the rest
    counts = await store.prune(time.time() + 60)
    assert counts["messages"] >= 1
    assert await store.get_message(e.id) is None


async def test_cost_since(store: Store) -> None:
    since = time.time()
    ids = []
    for i in range(4):
        m, _ = await store.accept(inbound(f"ev{i}"), home="h", is_command=False)
        ids.append((await store.start_run(m.id, "U1", 1)).id)
    await store.finish_run(
        ids[0], RunOutcome(True, 0, None, cost_usd=0.5, cost_known=True), InboxState.DONE, []
    )
    await store.finish_run(
        ids[1], RunOutcome(False, 1, "x", cost_usd=0.25, cost_known=True), InboxState.FAILED, []
    )
    await store.finish_run(ids[2], RunOutcome(False, None, None), InboxState.FAILED, [])
    # ids[3] is still running: neither priced nor counted.
    assert await store.cost_since(since) == (0.75, 1)
    assert await store.cost_since(time.time() + 60) == (0.0, 0)
