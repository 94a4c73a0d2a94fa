"""The store contract, replies and their delivery: recorded once per dedupe key (in the order
given), their delivery states and attempts, what recovery still owes, and a thread's
transcript as a person saw it."""

from __future__ import annotations

import asyncio
import time

import pytest
from store_support import Backend, inbound, reply

from bridge.model import (
    Choice,
    InboxState,
    ReplyKind,
    ReplyState,
    ReplyTarget,
)
from bridge.store import RunOutcome, Store, StoreError


async def test_finish_run_twice_dedupes_replies(store: Store) -> None:
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


async def test_mark_reply_and_undelivered_order(store: Store) -> None:
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


async def test_transcript_order_and_roles(store: Store) -> None:
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


async def test_a_mark_written_soon_is_durable_alone_and_at_close(backend: Backend) -> None:
    """``soon`` may wait for another write to share its commit; with none coming, awaiting
    it still returns once it is written, and a store closed meanwhile writes it first."""
    s = backend.make()
    await s.open()
    try:
        m, _ = await s.accept(inbound("ev1"), home="h", is_command=False)
        a, b = await s.add_replies([reply("a", m.conversation_id), reply("b", m.conversation_id)])
        await asyncio.wait_for(s.mark_reply(a.id, ReplyState.SENT, soon=True), timeout=10)
        marking = asyncio.ensure_future(s.mark_reply(b.id, ReplyState.SENT, soon=True))
        await asyncio.sleep(0)  # one loop turn: the task hands the write in (not a timed wait)
    finally:
        await s.close()
    await asyncio.wait_for(marking, timeout=10)
    again = backend.make()
    await again.open()
    try:
        assert await again.undelivered_replies() == []
        for r in (a, b):
            stored = await again.get_reply(r.id)
            assert stored is not None and stored.state is ReplyState.SENT
    finally:
        await again.close()
