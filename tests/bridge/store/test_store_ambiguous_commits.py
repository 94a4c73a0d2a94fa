"""The store contract, writes made again: each write retried as if its commit were ambiguous.

A write answered :class:`~bridge.store.StoreUnavailable` is made again by
:class:`~bridge.store.StoreRetry`, and so may be one whose caller stopped waiting. The
contract (:mod:`bridge.store.base`) says which writes leave the state as one write left it
when made again after they landed, and what the repeat answers; here each is made twice
and the state compared, read through the store alone. The writes that are not safe to
make twice are pinned as the contract states them: a backend must settle an ambiguous
commit of those before it answers, never answer StoreUnavailable for one that landed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from store_support import inbound, reply

from bridge.model import InboxState, ReplyState
from bridge.store import (
    MessageRecord,
    PromptRecord,
    RunOutcome,
    Store,
    StoreError,
    StoreUnavailable,
)

T = TypeVar("T")

DONE = RunOutcome(ok=True, exit_code=0, envelope_code=None)


async def state(store: Store) -> dict[str, Any]:
    """Everything a caller can read of the store, less the times a repeat may move (when a
    message or a run finished: written again by the repeat)."""
    conversations = await store.conversations()
    messages = [m for s in InboxState for m in await store.messages_in_state(s)]
    runs = [r for c in conversations for r in await store.runs(c.id, limit=1000)]

    def without_finish(record: Any) -> dict[str, Any]:
        fields = dataclasses.asdict(record)
        fields["finished_at"] = fields["finished_at"] is not None
        return fields

    return {
        "conversations": conversations,
        "messages": sorted((without_finish(m) for m in messages), key=lambda m: m["id"]),
        "runs": [without_finish(r) for r in runs],
        "transcripts": [await store.transcript(c.thread_key) for c in conversations],
        "undelivered": await store.undelivered_replies(),
        "unanswered": await store.unanswered_messages(),
        "pending prompts": await store.pending_prompts(None),
        "kv": await store.get_kv("k"),
    }


async def made_twice(store: Store, write: Callable[[], Awaitable[T]]) -> tuple[T, T]:
    """``write()`` made, then made again as a retry after an ambiguous commit would: the
    second leaves the state as the first left it. Returns both answers."""
    first = await write()
    once = await state(store)
    second = await write()
    assert await state(store) == once
    return first, second


async def accepted(store: Store, event_id: str = "ev1", **kw: Any) -> MessageRecord:
    message, _ = await store.accept(inbound(event_id, **kw), home="h", is_command=False)
    return message


# -- writes safe to make again ---------------------------------------------------------------


async def test_accept_made_again_returns_the_message_it_stored(store: Store) -> None:
    first, second = await made_twice(
        store, lambda: store.accept(inbound("ev1"), home="h", is_command=False)
    )
    assert first[1] and not second[1]
    assert second[0] == first[0]


async def test_a_burst_of_accepts_made_again_returns_the_messages_it_stored(
    store: Store,
) -> None:
    """Accepts in flight together (one batch, where a backend batches them), a duplicate
    among them, retried together as after an ambiguous commit of the lot: each message
    stored once, and every repeat answers "already there" with the record stored first."""
    await accepted(store, "stored")
    events = [inbound("a"), inbound("b"), inbound("a"), inbound("stored"), inbound("c")]

    async def burst() -> list[tuple[MessageRecord, bool]]:
        return list(
            await asyncio.gather(*(store.accept(e, home="h", is_command=False) for e in events))
        )

    first, second = await made_twice(store, burst)
    assert [new for _, new in first] == [True, True, False, False, True]
    assert not any(new for _, new in second)
    assert [rec for rec, _ in second] == [rec for rec, _ in first]
    assert len(await store.messages_in_state(InboxState.ACCEPTED)) == 4


async def test_complete_message_made_again_records_nothing_more(store: Store) -> None:
    message = await accepted(store, "p1", part_of="album")
    part = await accepted(store, "p2", part_of="album")
    replies = [reply("r1", message.conversation_id, message_id=message.id)]
    first, second = await made_twice(
        store,
        lambda: store.complete_message(message.id, InboxState.FAILED, replies, parts=[part.id]),
    )
    assert second == first
    merged = await store.get_message(part.id)
    assert merged is not None and merged.state is InboxState.MERGED


async def test_redact_message_made_again_changes_nothing(store: Store) -> None:
    message = await accepted(store, text="a secret")
    await made_twice(store, lambda: store.redact_message(message.id))
    redacted = await store.get_message(message.id)
    assert redacted is not None and redacted.text == "[redacted]"


async def test_start_new_epoch_made_again_bumps_nothing(store: Store) -> None:
    new, _ = await store.accept(inbound("ev1"), home="h", is_command=True, starts_epoch=True)
    first, second = await made_twice(
        store,
        lambda: store.start_new_epoch(
            new.id,
            lambda e: reply(f"new:{new.id}", new.conversation_id, text=f"#{e}", message_id=new.id),
        ),
    )
    assert second == first
    conversation = await store.conversation(new.conversation_id)
    assert conversation is not None and conversation.epoch == 2


async def test_finish_run_made_again_records_nothing_more(store: Store) -> None:
    message = await accepted(store)
    run = await store.start_run(message.id, "U1", 1)
    replies = [reply("a", message.conversation_id, message_id=message.id, text="one")]
    first, second = await made_twice(
        store, lambda: store.finish_run(run.id, DONE, InboxState.DONE, replies)
    )
    assert second == first
    [finished] = await store.runs(message.conversation_id)
    assert finished.outcome == DONE


async def test_add_replies_made_again_returns_the_replies_it_recorded(store: Store) -> None:
    message = await accepted(store)
    cid = message.conversation_id
    first, second = await made_twice(
        store, lambda: store.add_replies([reply("a", cid), reply("b", cid)])
    )
    assert second == first
    assert [r.id for r in await store.undelivered_replies()] == [r.id for r in first]


async def test_prune_made_again_finds_nothing_more(store: Store) -> None:
    message = await accepted(store)
    run = await store.start_run(message.id, "U1", 1)
    [sent] = await store.finish_run(
        run.id, DONE, InboxState.DONE, [reply("a", message.conversation_id, message_id=message.id)]
    )
    await store.mark_reply(sent.id, ReplyState.SENT)
    before = time.time() + 3600
    first, second = await made_twice(store, lambda: store.prune(before))
    assert first == {"prompts": 0, "runs": 1, "replies": 1, "messages": 1}
    assert set(second.values()) == {0}


async def test_expire_prompts_made_again_expires_nothing_more(store: Store) -> None:
    message = await accepted(store)
    run = await store.start_run(message.id, "U1", 1)
    await store.add_prompts(
        [PromptRecord("t1", run.id, message.conversation_id, "U1", "approval", "c1")]
    )
    first, second = await made_twice(store, lambda: store.expire_prompts(run.id))
    assert (first, second) == (1, 0)


async def test_set_kv_made_again_changes_nothing(store: Store) -> None:
    await made_twice(store, lambda: store.set_kv("k", "v"))
    assert await store.get_kv("k") == "v"


# -- writes a backend must never leave ambiguous ---------------------------------------------


async def test_writes_not_safe_to_make_again_are_as_the_contract_says(store: Store) -> None:
    """What each would do if a landed write were answered StoreUnavailable and made again:
    why a backend settles an ambiguous commit before it answers."""
    first = await accepted(store, "ev1")
    second = await accepted(store, "ev2")
    cid = first.conversation_id
    assert [await store.new_epoch(cid), await store.new_epoch(cid)] == [2, 3]  # bumped twice

    run = await store.begin_run(first.id, "U1")
    assert run is not None
    assert await store.begin_run(first.id, "U1") is None  # "not accepted any more"

    again = [await store.start_run(second.id, "U1", 1), await store.start_run(second.id, "U1", 1)]
    assert len({r.id for r in again}) == 2  # two runs of one message

    prompt = PromptRecord("t1", run.id, cid, "U1", "approval", "c1")
    await store.add_prompts([prompt])
    with pytest.raises(StoreError) as refused:
        await store.add_prompts([prompt])  # the token is there: refused, and for good
    assert not isinstance(refused.value, StoreUnavailable)
    assert await store.resolve_prompt("t1", {"approved": True})
    assert not await store.resolve_prompt("t1", {"approved": True})  # "answered already"

    [rec] = await store.add_replies([reply("a", cid)])
    await store.mark_reply(rec.id, ReplyState.SENDING)
    await store.mark_reply(rec.id, ReplyState.SENDING)
    counted = await store.get_reply(rec.id)
    assert counted is not None and counted.attempts == 2  # each SENDING is an attempt
