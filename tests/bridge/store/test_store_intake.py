"""The store contract, intake: a message is accepted once per platform event (a redelivery
returns the stored one, untouched, concurrent ones included), and its conversation is made
by the first and updated by the next, never moved to another home."""

from __future__ import annotations

import asyncio

from store_support import inbound

from bridge.model import (
    Attachment,
    InboxState,
)
from bridge.store import Store


async def test_accept_and_duplicate_event_id(store: Store) -> None:
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


async def test_second_message_updates_conversation_not_home(store: Store) -> None:
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


async def test_same_event_id_on_another_platform_is_another_message(store: Store) -> None:
    a, new_a = await store.accept(inbound("42"), home="h", is_command=False)
    b, new_b = await store.accept(
        inbound("42", platform="telegram", thread_key="telegram:bot:7"), home="t", is_command=False
    )
    assert new_a and new_b
    assert a.id != b.id and a.conversation_id != b.conversation_id


async def test_concurrent_accepts_dedupe(store: Store) -> None:
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


async def test_where_a_messages_files_were_saved_is_recorded_and_in_its_transcript(
    store: Store,
) -> None:
    """The turn records each saved file's ``local_path`` (the web chat's page links a
    person's own files so); the transcript's user line carries them, a reply's none."""
    rec, _ = await store.accept(
        inbound("ev-files", attachments=(Attachment(name="a.txt", size=3),)),
        home="h",
        is_command=False,
    )
    saved = [{"name": "a.txt", "size": 3, "local_path": "/r/chats/h/workspace/a.txt"}]
    await store.saved_attachments(rec.id, saved)
    await store.saved_attachments(rec.id, saved)  # repeated: the same
    got = await store.get_message(rec.id)
    assert got is not None and got.attachments == saved
    (line,) = await store.transcript(rec.thread_key)
    assert line.role == "user" and line.attachments == saved
