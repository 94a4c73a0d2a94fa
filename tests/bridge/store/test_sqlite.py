"""SqliteStore against real SQLite files: intake dedupe, atomic transitions, recovery queries,
prompts, and the state-file rules (newer schema refused, unreadable file moved aside)."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.model import (
    Attachment,
    Choice,
    Inbound,
    InboxState,
    Outgoing,
    ReplyKind,
    ReplyState,
    ReplyTarget,
)
from bridge.store import (
    NewReply,
    PromptRecord,
    RunOutcome,
    SqliteStore,
    StoreError,
    StoreSchemaTooNew,
)
from bridge.store.sqlite.schema import SCHEMA_V1, SCHEMA_VERSION


def inbound(
    event_id: str = "ev1",
    *,
    platform: str = "slack",
    thread_key: str = "slack:T1:C1:1.0",
    text: str = "hello",
    target: dict[str, object] | None = None,
    received_at: float | None = None,
    **kw: object,
) -> Inbound:
    return Inbound(
        platform=platform,
        event_id=event_id,
        thread_key=thread_key,
        sender_id="U1",
        text=text,
        target=target if target is not None else {"channel": "C1", "thread_ts": "1.0"},
        received_at=received_at if received_at is not None else time.time(),
        **kw,  # type: ignore[arg-type]
    )


def reply(
    key: str,
    conversation_id: int,
    *,
    kind: ReplyKind = ReplyKind.ANSWER,
    text: str = "answer",
    message_id: int | None = None,
    **kw: object,
) -> NewReply:
    return NewReply(
        dedupe_key=key,
        conversation_id=conversation_id,
        outgoing=Outgoing(kind=kind, text=text, **kw),  # type: ignore[arg-type]
        target=ReplyTarget(surface="slack", thread_key="slack:T1:C1:1.0", context={"c": "C1"}),
        message_id=message_id,
    )


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "bridge.db"  # the parent does not exist yet


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(db_path)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


# -- intake ----------------------------------------------------------------------------------


async def test_accept_and_duplicate_event_id(store: SqliteStore) -> None:
    first = inbound(
        "ev1",
        sender_name="Ann",
        attachments=(Attachment(name="a.txt", size=3),),
        shared_chat=True,
    )
    rec, new = await store.accept(first, home="slack-c1-abc", is_command=False)
    assert new
    assert rec.state is InboxState.ACCEPTED
    assert rec.text == "hello" and rec.sender_name == "Ann" and rec.shared_chat
    assert rec.attachments == [{"name": "a.txt", "size": 3}]
    assert rec.target == {"channel": "C1", "thread_ts": "1.0"}

    again, new_again = await store.accept(
        inbound("ev1", text="changed", target={"other": 1}), home="x", is_command=True
    )
    assert not new_again
    assert again == rec  # the stored record, untouched by the redelivery
    conv = await store.conversation(rec.conversation_id)
    assert conv is not None
    assert conv.target == {"channel": "C1", "thread_ts": "1.0"}  # no other change
    assert conv.home == "slack-c1-abc" and conv.epoch == 1


async def test_second_message_updates_conversation_not_home(store: SqliteStore) -> None:
    a, _ = await store.accept(inbound("ev1"), home="h1", is_command=False)
    before = await store.conversation(a.conversation_id)
    b, _ = await store.accept(inbound("ev2", target={"channel": "C2"}), home="h2", is_command=True)
    after = await store.conversation_by_key("slack:T1:C1:1.0")
    assert before is not None and after is not None
    assert a.conversation_id == b.conversation_id == after.id
    assert after.home == "h1"
    assert after.target == {"channel": "C2"}
    assert after.last_active_at >= before.last_active_at
    assert b.is_command
    assert [c.id for c in await store.conversations()] == [after.id]


async def test_latest_conversation_by_key_prefix(store: SqliteStore, db_path: Path) -> None:
    keys = ["slack:T1:C1:1.0", "slack:T1:C1:2.0", "slack:T1:C10:9.0", "slack:T1:C%:5.0"]
    for i, key in enumerate(keys):
        await store.accept(inbound(f"e{i}", thread_key=key), home=f"h{i}", is_command=False)
    # the activity order is set by hand: C1's first thread is the most recent
    conn = sqlite3.connect(db_path)
    with conn:
        for key, at in [(keys[0], 300.0), (keys[1], 200.0), (keys[2], 900.0), (keys[3], 800.0)]:
            conn.execute(
                "UPDATE conversations SET last_active_at = ? WHERE thread_key = ?", (at, key)
            )
    conn.close()
    latest = await store.latest_conversation("slack:T1:C1:")
    assert latest is not None and latest.thread_key == keys[0]  # not C10's, though newer
    wild = await store.latest_conversation("slack:T1:C%:")  # no wildcard meaning
    assert wild is not None and wild.thread_key == keys[3]
    assert await store.latest_conversation("slack:T1:C2:") is None


async def test_same_event_id_on_another_platform_is_another_message(store: SqliteStore) -> None:
    a, new_a = await store.accept(inbound("42"), home="h", is_command=False)
    b, new_b = await store.accept(
        inbound("42", platform="telegram", thread_key="telegram:bot:7"), home="t", is_command=False
    )
    assert new_a and new_b
    assert a.id != b.id and a.conversation_id != b.conversation_id


async def test_concurrent_accepts_dedupe(store: SqliteStore) -> None:
    events = [inbound(f"ev{i % 10}", text=f"t{i}") for i in range(40)]
    results = await asyncio.gather(*(store.accept(e, home="h", is_command=False) for e in events))
    ids: dict[str, set[int]] = {}
    fresh = 0
    for rec, new in results:
        ids.setdefault(rec.event_id, set()).add(rec.id)
        fresh += new
    assert fresh == 10
    assert all(len(v) == 1 for v in ids.values())
    assert len(await store.messages_in_state(InboxState.ACCEPTED)) == 10


async def test_concurrent_accepts_share_commits_and_fail_alone(
    store: SqliteStore, db_path: Path
) -> None:
    """Group commit: accepts in flight together share COMMITs; one that fails fails alone,
    and every accept that returned is on disk (another connection sees it)."""
    commits: list[str] = []

    def trace(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)

    await store._call(trace)
    good = [inbound(f"g{i}", thread_key=f"slack:T1:C1:{i}.0") for i in range(30)]
    bad = inbound("bad", thread_key="slack:T1:C1:bad")
    results = await asyncio.gather(
        *(store.accept(e, home="h", is_command=False) for e in good[:15]),
        store.accept(bad, home=None, is_command=False),  # type: ignore[arg-type]
        *(store.accept(e, home="h", is_command=False) for e in good[15:]),
        return_exceptions=True,
    )
    assert isinstance(results[15], StoreError), results[15]
    assert all(isinstance(r, tuple) and r[1] for i, r in enumerate(results) if i != 15)
    assert 1 <= len(commits) < len(good)
    with sqlite3.connect(db_path) as other:
        stored = {row[0] for row in other.execute("SELECT event_id FROM inbox")}
    assert stored == {f"g{i}" for i in range(30)}


async def test_sqlite_runs_off_the_event_loop_thread(store: SqliteStore) -> None:
    worker = await store._call(lambda conn: threading.get_ident())
    assert worker != threading.get_ident()


# -- state transitions -----------------------------------------------------------------------


async def test_run_lifecycle(store: SqliteStore) -> None:
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


async def test_complete_message_records_replies(store: SqliteStore) -> None:
    m, _ = await store.accept(inbound("cmd"), home="h", is_command=True)
    recs = await store.complete_message(
        m.id, InboxState.DONE, [reply("help", m.conversation_id, kind=ReplyKind.NOTICE)]
    )
    assert [r.dedupe_key for r in recs] == ["help"]
    assert recs[0].outgoing.kind is ReplyKind.NOTICE
    with pytest.raises(StoreError):
        await store.complete_message(9999, InboxState.DONE, [])


async def test_finish_run_is_atomic(store: SqliteStore) -> None:
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


async def test_finish_run_twice_dedupes_replies(store: SqliteStore) -> None:
    m, _ = await store.accept(inbound("ev1"), home="h", is_command=False)
    cid = m.conversation_id
    run = await store.start_run(m.id, "U1", 1)
    replies = [reply("a", cid, text="one"), reply("b", cid, text="two")]
    first = await store.finish_run(run.id, RunOutcome(True, 0, None), InboxState.DONE, replies)
    second = await store.finish_run(run.id, RunOutcome(True, 0, None), InboxState.DONE, replies)
    assert [r.id for r in first] == [r.id for r in second]
    assert [r.outgoing.text for r in second] == ["one", "two"]

    mixed = await store.add_replies([reply("c", cid, text="three"), reply("a", cid, text="x")])
    assert mixed[1] == first[0]  # the existing record, in the order given
    assert mixed[0].id > first[1].id
    assert len(await store.undelivered_replies()) == 3


async def test_mark_reply_and_undelivered_order(store: SqliteStore) -> None:
    m, _ = await store.accept(inbound("ev1"), home="h", is_command=False)
    cid = m.conversation_id
    a, b, c = await store.add_replies([reply("a", cid), reply("b", cid), reply("c", cid)])
    assert a.target == ReplyTarget("slack", "slack:T1:C1:1.0", {"c": "C1"})

    await store.mark_reply(b.id, ReplyState.SENDING)
    await store.mark_reply(b.id, ReplyState.SENDING)
    b2 = await store.get_reply(b.id)
    assert b2 is not None and b2.state is ReplyState.SENDING and b2.attempts == 2

    await store.mark_reply(a.id, ReplyState.SENDING)
    await store.mark_reply(a.id, ReplyState.SENT, platform_ref="1700.01")
    a2 = await store.get_reply(a.id)
    assert a2 is not None and a2.state is ReplyState.SENT
    assert a2.sent_at is not None and a2.platform_ref == "1700.01" and a2.attempts == 1

    await store.mark_reply(c.id, ReplyState.FAILED, error="channel_not_found")
    c2 = await store.get_reply(c.id)
    assert c2 is not None and c2.state is ReplyState.FAILED and c2.last_error == "channel_not_found"

    d, e = await store.add_replies([reply("d", cid), reply("e", cid)])
    assert [r.id for r in await store.undelivered_replies()] == [b.id, d.id, e.id]
    assert await store.get_reply(9999) is None
    with pytest.raises(StoreError):
        await store.mark_reply(9999, ReplyState.SENT)


# -- transcript ------------------------------------------------------------------------------


async def test_transcript_order_and_roles(store: SqliteStore) -> None:
    m1, _ = await store.accept(
        inbound("ev1", text="hi", sender_name="Ann", received_at=100.0), home="h", is_command=False
    )
    cid = m1.conversation_id
    prompt_choices = (Choice("tok1", "Approve", "primary"), Choice("tok2", "Deny", "danger"))
    recs = await store.add_replies(
        [
            reply("n", cid, kind=ReplyKind.NOTICE, text="queued", message_id=m1.id),
            reply("p", cid, kind=ReplyKind.PROMPT, text="run ls?", choices=prompt_choices),
            reply("a", cid, kind=ReplyKind.ANSWER, text="done", message_id=m1.id),
            reply("f", cid, kind=ReplyKind.ARTIFACT, text="report", file_path="out/r.pdf"),
            reply("e", cid, kind=ReplyKind.ERROR, text="failed plainly"),
            reply("x", cid, kind=ReplyKind.ANSWER, text="never delivered"),
        ]
    )
    await store.mark_reply(recs[0].id, ReplyState.SENT, platform_ref="r")
    await store.mark_reply(recs[1].id, ReplyState.SENDING)
    await store.mark_reply(recs[5].id, ReplyState.FAILED, error="gone")
    # A later user message with no sender name; another thread's message stays out.
    await store.accept(
        inbound("ev2", text="again", received_at=time.time() + 10), home="h", is_command=False
    )
    await store.accept(inbound("ev3", thread_key="other"), home="o", is_command=False)

    entries = await store.transcript("slack:T1:C1:1.0")
    assert [(e.role, e.text) for e in entries] == [
        ("user", "hi"),
        ("status", "queued"),
        ("prompt", "run ls?"),
        ("assistant", "done"),
        ("assistant", "report"),
        ("error", "failed plainly"),
        ("user", "again"),
    ]
    assert entries[0].sender == "Ann" and entries[0].message_id == m1.id and entries[0].at == 100.0
    assert entries[-1].sender == "U1"
    assert entries[1].reply_id == recs[0].id and entries[1].message_id == m1.id
    assert entries[2].choices == [
        {"token": "tok1", "label": "Approve", "style": "primary"},
        {"token": "tok2", "label": "Deny", "style": "danger"},
    ]
    assert entries[4].file_path == "out/r.pdf"

    last = await store.transcript("slack:T1:C1:1.0", limit=2)
    assert [e.text for e in last] == ["failed plainly", "again"]
    assert await store.transcript("no-such-thread") == []


# -- prompts ---------------------------------------------------------------------------------


async def test_prompts_resolve_once_and_expire(store: SqliteStore) -> None:
    m1, _ = await store.accept(inbound("ev1"), home="h", is_command=False)
    m2, _ = await store.accept(inbound("ev2"), home="h", is_command=False)
    cid = m1.conversation_id
    r1 = await store.start_run(m1.id, "U1", 1)
    r2 = await store.start_run(m2.id, "U1", 1)

    def prompt(token: str, run_id: int) -> PromptRecord:
        return PromptRecord(
            token=token,
            run_id=run_id,
            conversation_id=cid,
            requester="U1",
            kind="approval",
            request_id=f"call-{token}",
            payload={"tool": "bash"},
        )

    await store.add_prompts([prompt("t1", r1.id), prompt("t2", r1.id), prompt("t3", r2.id)])
    got = await store.get_prompt("t1")
    assert got is not None and got.state == "pending" and got.payload == {"tool": "bash"}
    assert got.created_at > 0
    assert [p.token for p in await store.pending_prompts(cid)] == ["t1", "t2", "t3"]
    assert [p.token for p in await store.pending_prompts(None)] == ["t1", "t2", "t3"]

    first, second = await asyncio.gather(
        store.resolve_prompt("t1", {"approved": True}),
        store.resolve_prompt("t1", {"approved": False}),
    )
    assert (first, second) == (True, False)
    answered = await store.get_prompt("t1")
    assert answered is not None
    assert answered.state == "answered" and answered.answer == {"approved": True}
    assert answered.answered_at is not None
    assert not await store.resolve_prompt("nope", {})

    assert await store.expire_prompts(r1.id) == 1  # t2; t1 was answered
    assert [p.token for p in await store.pending_prompts(cid)] == ["t3"]
    assert not await store.resolve_prompt("t2", {"approved": True})
    assert await store.expire_prompts(None) == 1
    assert await store.pending_prompts(cid) == []
    assert await store.get_prompt("missing") is None


# -- costs, epochs, kv -----------------------------------------------------------------------


async def test_cost_since(store: SqliteStore) -> None:
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


async def test_new_epoch_and_kv(store: SqliteStore) -> None:
    m, _ = await store.accept(inbound("ev1"), home="h", is_command=False)
    assert await store.new_epoch(m.conversation_id) == 2
    assert await store.new_epoch(m.conversation_id) == 3
    conv = await store.conversation(m.conversation_id)
    assert conv is not None and conv.epoch == 3
    with pytest.raises(StoreError):
        await store.new_epoch(9999)

    assert await store.get_kv("telegram.offset") is None
    await store.set_kv("telegram.offset", "10")
    await store.set_kv("telegram.offset", "11")
    assert await store.get_kv("telegram.offset") == "11"


async def test_a_message_runs_in_the_epoch_it_was_written_in(store: SqliteStore) -> None:
    """A message sent before /new runs in the conversation it was written for."""
    before, _ = await store.accept(inbound("ev1"), home="h", is_command=False)
    assert await store.new_epoch(before.conversation_id) == 2
    after, _ = await store.accept(inbound("ev2"), home="h", is_command=False)
    run_before = await store.begin_run(before.id, "U1")
    run_after = await store.begin_run(after.id, "U1")
    assert run_before is not None and run_after is not None
    assert (run_before.epoch, run_after.epoch) == (1, 2)


async def test_new_bumps_the_epoch_as_it_is_accepted(store: SqliteStore) -> None:
    """A message accepted right after /new (before /new is answered) runs in the fresh
    conversation; answering /new bumps nothing more, and its replay answers it once."""
    new, _ = await store.accept(inbound("ev1"), home="h", is_command=True, starts_epoch=True)
    after, _ = await store.accept(inbound("ev2"), home="h", is_command=False)
    run = await store.begin_run(after.id, "U1")
    assert run is not None and run.epoch == 2

    def answer(epoch: int) -> NewReply:
        return reply(f"new:{new.id}", new.conversation_id, text=f"#{epoch}", message_id=new.id)

    (answered,) = await store.start_new_epoch(new.id, answer)
    assert answered.outgoing.text == "#2"
    assert [r.outgoing.text for r in await store.start_new_epoch(new.id, answer)] == ["#2"]
    conv = await store.conversation(new.conversation_id)
    assert conv is not None and conv.epoch == 2
    # one an older jazz-bridge accepted (no bump then) is bumped as it is answered
    old, _ = await store.accept(inbound("ev3"), home="h", is_command=True)
    (answered,) = await store.start_new_epoch(
        old.id, lambda e: reply(f"new:{old.id}", old.conversation_id, text=f"#{e}")
    )
    assert answered.outgoing.text == "#3"


async def test_the_parts_of_a_message_close_with_its_run_start_or_its_answer(
    store: SqliteStore,
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


async def test_a_version_1_store_is_migrated_in_place(db_path: Path) -> None:
    db_path.parent.mkdir()
    conn = sqlite3.connect(db_path)
    conn.executescript(SCHEMA_V1)
    conn.execute(
        "INSERT INTO conversations (thread_key, platform, home, epoch, created_at,"
        " last_active_at) VALUES ('slack:T1:C1:1.0', 'slack', 'h', 3, 0, 0)"
    )
    conn.execute(
        "INSERT INTO inbox (conversation_id, platform, event_id, thread_key, sender_id, text,"
        " state, received_at) VALUES (1, 'slack', 'old', 'slack:T1:C1:1.0', 'U1', 'hi',"
        " 'accepted', 0)"
    )
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    s = SqliteStore(db_path)
    await s.open()
    try:
        (old,) = await s.messages_in_state(InboxState.ACCEPTED)
        run = await s.begin_run(old.id, "U1")
        assert run is not None and run.epoch == 3  # written before epochs were kept: today's
        new, _ = await s.accept(inbound("new"), home="h", is_command=False)
        run = await s.begin_run(new.id, "U1")
        assert run is not None and run.epoch == 3
        (old_row,) = [m for m in await s.messages_in_state(InboxState.RUNNING) if m.id == old.id]
        assert old_row.part_of is None  # a whole message, as every message was then
    finally:
        await s.close()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4


# -- files, durability, schema ---------------------------------------------------------------


async def test_durable_once_accept_returns(store: SqliteStore, db_path: Path) -> None:
    rec, _ = await store.accept(inbound("ev1"), home="h", is_command=False)
    other = sqlite3.connect(db_path)
    try:
        row = other.execute("SELECT event_id, state FROM inbox WHERE id = ?", (rec.id,)).fetchone()
        modes = other.execute("PRAGMA journal_mode").fetchone()
    finally:
        other.close()
    assert row == ("ev1", "accepted")
    assert modes == ("wal",)


async def test_persists_across_close_and_open(db_path: Path) -> None:
    s = SqliteStore(db_path)
    await s.open()
    rec, _ = await s.accept(inbound("ev1"), home="h", is_command=False)
    await s.set_kv("k", "v")
    await s.close()
    with pytest.raises(StoreError):
        await s.get_kv("k")

    s2 = SqliteStore(db_path)
    await s2.open()
    try:
        assert await s2.get_message(rec.id) == rec
        assert await s2.get_kv("k") == "v"
        again, new = await s2.accept(inbound("ev1"), home="h", is_command=False)
        assert not new and again.id == rec.id
    finally:
        await s2.close()


async def test_close_lets_calls_already_made_finish(db_path: Path) -> None:
    s = SqliteStore(db_path)
    await s.open()
    # Tasks start in creation order: the accepts reach the worker before the close does.
    accepts = [
        asyncio.create_task(s.accept(inbound(f"ev{i}"), home="h", is_command=False))
        for i in range(5)
    ]
    closing = asyncio.create_task(s.close())
    results = await asyncio.gather(*accepts)
    await closing
    assert all(new for _, new in results)
    other = sqlite3.connect(db_path)
    try:
        assert other.execute("SELECT count(*) FROM inbox").fetchone() == (5,)
    finally:
        other.close()


async def test_not_open_is_an_error(db_path: Path) -> None:
    with pytest.raises(StoreError):
        await SqliteStore(db_path).get_kv("k")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_file_modes(db_path: Path) -> None:
    old = os.umask(0)  # even with a permissive umask the files stay 0640
    try:
        s = SqliteStore(db_path)
        await s.open()
    finally:
        os.umask(old)
    try:
        await s.accept(inbound("ev1"), home="h", is_command=False)
        for name in ("bridge.db", "bridge.db-wal", "bridge.db-shm"):
            assert _mode(db_path.with_name(name)) == 0o640, name
        assert not _mode(db_path.parent) & stat.S_IRWXO
    finally:
        await s.close()


async def test_existing_loose_file_is_tightened(db_path: Path) -> None:
    db_path.parent.mkdir()
    sqlite3.connect(db_path).close()
    db_path.chmod(0o666)
    s = SqliteStore(db_path, file_mode=0o600)
    await s.open()
    try:
        assert _mode(db_path) == 0o600
    finally:
        await s.close()


def test_world_readable_mode_is_refused(db_path: Path) -> None:
    with pytest.raises(ValueError):
        SqliteStore(db_path, file_mode=0o644)


async def test_newer_schema_is_refused_and_left_untouched(db_path: Path) -> None:
    db_path.parent.mkdir()
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE future (x)")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    before = db_path.read_bytes()
    files_before = sorted(os.listdir(db_path.parent))

    s = SqliteStore(db_path)
    with pytest.raises(StoreSchemaTooNew) as info:
        await s.open()
    message = str(info.value)
    assert str(db_path) in message
    assert str(SCHEMA_VERSION + 1) in message and str(SCHEMA_VERSION) in message
    assert db_path.read_bytes() == before
    assert sorted(os.listdir(db_path.parent)) == files_before
    with pytest.raises(StoreError):
        await s.get_kv("k")  # it did not half-open


async def test_foreign_database_is_refused(db_path: Path) -> None:
    db_path.parent.mkdir()
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE someone_elses (x)")
    conn.commit()
    conn.close()
    before = db_path.read_bytes()
    with pytest.raises(StoreError, match="something else"):
        await SqliteStore(db_path).open()
    assert db_path.read_bytes() == before


async def test_garbage_file_is_moved_aside(db_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db_path.parent.mkdir()
    garbage = b"this is not a database at all\n" * 200
    db_path.write_bytes(garbage)
    wal = db_path.with_name("bridge.db-wal")
    wal.write_bytes(b"stale wal")

    s = SqliteStore(db_path)
    with caplog.at_level(logging.WARNING, logger="bridge.store.sqlite"):
        await s.open()
    try:
        [aside] = [
            p
            for p in db_path.parent.iterdir()
            if p.name.startswith("bridge.db.corrupt-") and not p.name.endswith(("-wal", "-shm"))
        ]
        assert aside.read_bytes() == garbage
        assert aside.with_name(aside.name + "-wal").read_bytes() == b"stale wal"
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert any(
            str(db_path) in r.getMessage() and str(aside) in r.getMessage() for r in warnings
        )
        rec, new = await s.accept(inbound("ev1"), home="h", is_command=False)
        assert new and await s.get_message(rec.id) == rec
        assert _mode(db_path) == 0o640
    finally:
        await s.close()


async def test_corrupt_pages_are_moved_aside(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = SqliteStore(db_path)
    await s.open()
    await s.accept(inbound("ev1"), home="h", is_command=False)
    await s.close()
    data = bytearray(db_path.read_bytes())
    page = 4096
    assert len(data) > 3 * page
    data[2 * page : 3 * page] = b"\xff" * page  # page 3: a table's b-tree page
    db_path.write_bytes(bytes(data))

    s2 = SqliteStore(db_path)
    with caplog.at_level(logging.WARNING, logger="bridge.store.sqlite"):
        await s2.open()
    try:
        assert any("quick_check" in r.getMessage() for r in caplog.records)
        assert [p for p in db_path.parent.iterdir() if ".corrupt-" in p.name]
        assert await s2.messages_in_state(InboxState.ACCEPTED) == []
    finally:
        await s2.close()
