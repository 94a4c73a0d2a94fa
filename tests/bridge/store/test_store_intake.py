"""The store contract, intake: a message is accepted once per platform event (a redelivery
returns the stored one, untouched, concurrent ones included), and its conversation is made
by the first and updated by the next, never moved to another home."""

from __future__ import annotations

import asyncio

from store_support import inbound

from bridge.model import (
    Attachment,
    Inbound,
    InboxState,
)
from bridge.store import MessageRecord, Store, StoreError


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


# -- accepts in flight together (a backend may make them as one batch) -----------------------


async def accept_all(store: Store, events: list[Inbound]) -> list[tuple[MessageRecord, bool]]:
    """Every event's accept in flight at once, as a burst of requests makes them."""
    return list(
        await asyncio.gather(*(store.accept(e, home="h", is_command=False) for e in events))
    )


async def test_a_duplicate_inside_one_burst_is_the_earlier_message(store: Store) -> None:
    results = await accept_all(
        store,
        [
            inbound("ev1", text="first"),
            inbound("ev2"),
            inbound("ev1", text="again", target={"other": 1}),
            inbound("ev3"),
        ],
    )
    assert [new for _, new in results] == [True, True, False, True]
    assert results[2][0] == results[0][0]  # the stored one, not the repeat's text
    assert results[0][0].text == "first"
    ids = [rec.id for rec, _ in results]
    assert ids[0] < ids[1] < ids[3]  # ids grow in the order the accepts were made
    stored = await store.messages_in_state(InboxState.ACCEPTED)
    assert [m.event_id for m in stored] == ["ev1", "ev2", "ev3"]
    conv = await store.conversation(results[0][0].conversation_id)
    assert conv is not None and conv.target == {"channel": "C1", "thread_ts": "1.0"}


async def test_a_duplicate_of_a_stored_event_in_a_burst_changes_nothing(store: Store) -> None:
    old, _ = await store.accept(
        inbound("old", thread_key="slack:T1:C9:9.0", target={"channel": "C9"}),
        home="h9",
        is_command=False,
    )
    before = await store.conversation(old.conversation_id)
    results = await accept_all(
        store,
        [
            inbound("ev1"),
            inbound("old", text="changed", thread_key="slack:T1:C9:9.0", target={"x": 1}),
            inbound("ev2"),
        ],
    )
    assert [new for _, new in results] == [True, False, True]
    assert results[1][0] == old
    assert await store.conversation(old.conversation_id) == before  # not even touched
    assert len(await store.messages_in_state(InboxState.ACCEPTED)) == 3


async def test_a_burst_over_several_conversations_keeps_each_home_and_last_target(
    store: Store,
) -> None:
    events = [
        inbound(f"ev{i}", thread_key=f"slack:T1:C{i % 3}:1.0", target={"n": i}) for i in range(9)
    ]
    results = await asyncio.gather(
        *(store.accept(e, home=f"home-{i}", is_command=i == 4) for i, e in enumerate(events))
    )
    assert all(new for _, new in results)
    assert [rec.is_command for rec, _ in results] == [i == 4 for i in range(9)]
    for c in range(3):
        conv = await store.conversation_by_key(f"slack:T1:C{c}:1.0")
        assert conv is not None
        assert conv.home == f"home-{c}"  # its first message's
        assert conv.target == {"n": 6 + c}  # its last message's
        assert {rec.conversation_id for rec, _ in results[c::3]} == {conv.id}


async def test_a_new_conversation_in_a_burst_holds_what_comes_after_it(store: Store) -> None:
    a, _ = await store.accept(inbound("ev0"), home="h", is_command=False)
    results = await asyncio.gather(
        store.accept(inbound("ev1"), home="h", is_command=False),
        store.accept(inbound("new", text="/new"), home="h", is_command=True, starts_epoch=True),
        store.accept(inbound("ev2"), home="h", is_command=False),
    )
    assert [rec.starts_epoch for rec, _ in results] == [False, True, False]
    conv = await store.conversation(a.conversation_id)
    assert conv is not None and conv.epoch == 2  # bumped once, by the /new alone


async def test_a_bad_accept_in_a_burst_fails_alone(store: Store) -> None:
    good = [inbound(f"g{i}") for i in range(6)]
    results = await asyncio.gather(
        *(store.accept(e, home="h", is_command=False) for e in good[:3]),
        store.accept(inbound("bad", thread_key="slack:T1:C7:1.0"), home=None, is_command=False),  # type: ignore[arg-type]
        *(store.accept(e, home="h", is_command=False) for e in good[3:]),
        return_exceptions=True,
    )
    assert isinstance(results[3], StoreError), results[3]
    assert "null" in str(results[3]).lower()  # its own reason: the home it lacked
    assert all(isinstance(r, tuple) and r[1] for i, r in enumerate(results) if i != 3)
    stored = await store.messages_in_state(InboxState.ACCEPTED)
    assert [m.event_id for m in stored] == [f"g{i}" for i in range(6)]
    assert await store.conversation_by_key("slack:T1:C7:1.0") is None  # undone with it
