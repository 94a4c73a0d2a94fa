"""The store contract, conversations: found by key prefix (taken literally), the epoch /new
bumps (as /new is accepted, once, a replay bumping nothing), the epoch a message runs in
(the one it was written in), and the adapters' small key-value state."""

from __future__ import annotations

import pytest
from store_support import Backend, inbound, reply

from bridge.model import (
    InboxState,
    Outgoing,
    ReplyKind,
    ReplyTarget,
)
from bridge.store import NewReply, Store, StoreError
from provisioning import naming

KEY = "plain:room"


async def test_latest_conversation_by_key_prefix(store: Store, backend: Backend) -> None:
    keys = ["slack:T1:C1:1.0", "slack:T1:C1:2.0", "slack:T1:C10:9.0", "slack:T1:C%:5.0"]
    for i, key in enumerate(keys):
        await store.accept(inbound(f"e{i}", thread_key=key), home=f"h{i}", is_command=False)
    # the activity order is set by hand: C1's first thread is the most recent
    for key, at in [(keys[0], 300.0), (keys[1], 200.0), (keys[2], 900.0), (keys[3], 800.0)]:
        backend.set_last_active(key, at)
    latest = await store.latest_conversation("slack:T1:C1:")
    assert latest is not None and latest.thread_key == keys[0]  # not C10's, though newer
    wild = await store.latest_conversation("slack:T1:C%:")  # no wildcard meaning
    assert wild is not None and wild.thread_key == keys[3]
    assert await store.latest_conversation("slack:T1:C2:") is None


async def test_new_epoch_and_kv(store: Store) -> None:
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


async def test_a_message_runs_in_the_epoch_it_was_written_in(store: Store) -> None:
    """A message sent before /new runs in the conversation it was written for."""
    before, _ = await store.accept(inbound("ev1"), home="h", is_command=False)
    assert await store.new_epoch(before.conversation_id) == 2
    after, _ = await store.accept(inbound("ev2"), home="h", is_command=False)
    run_before = await store.begin_run(before.id, "U1")
    run_after = await store.begin_run(after.id, "U1")
    assert run_before is not None and run_after is not None
    assert (run_before.epoch, run_after.epoch) == (1, 2)


async def test_new_bumps_the_epoch_as_it_is_accepted(store: Store) -> None:
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


async def test_new_bumps_the_epoch_with_its_answer_and_a_replay_bumps_nothing(
    store: Store,
) -> None:
    msg, _ = await store.accept(
        inbound("e1", platform="plain", thread_key=KEY, text="/new"),
        home=naming.home_name(KEY),
        is_command=True,
    )

    def answer(epoch: int) -> NewReply:
        target = ReplyTarget(surface="plain", thread_key=KEY)
        out = Outgoing(ReplyKind.NOTICE, f"fresh #{epoch}")
        return NewReply(f"command-new:{msg.id}", msg.conversation_id, out, target, msg.id)

    first = await store.start_new_epoch(msg.id, answer)
    assert [r.outgoing.text for r in first] == ["fresh #2"]
    again = await store.start_new_epoch(msg.id, answer)  # a replay of the same message
    assert [r.id for r in again] == [first[0].id]
    conv = await store.conversation(msg.conversation_id)
    assert conv is not None and conv.epoch == 2
    done = await store.get_message(msg.id)
    assert done is not None and done.state is InboxState.DONE
    with pytest.raises(StoreError):
        await store.start_new_epoch(9999, answer)
