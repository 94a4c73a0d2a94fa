"""The SQLite backend's batched accepts, seen in the SQL it runs: accepts sharing a commit
are made as one multi-row insert (at most ``max_batch`` rows), and a batch that fails is
undone and made again one accept at a time, so only the bad one fails.

The contract tests (``test_store_intake.py``) pin what callers see; these pin that the
batch is really what made it (the statements traced on the store's own connection).
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_support import inbound

from bridge.model import Inbound, InboxState
from bridge.store import SqliteStore
from bridge.store.sqlite.core import MAX_BATCH
from bridge.store.sqlite.intake import AcceptWrite


async def traced(store: SqliteStore) -> list[str]:
    """Every statement the store's connection runs from now on, in order."""
    statements: list[str] = []

    def trace(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(statements.append)  # called on the store's one thread

    await store._call(trace)
    return statements


def inserted_rows(statements: list[str]) -> list[int]:
    """Rows of each inbox insert, in order (each row is one ``(...)`` of 17 values)."""
    return [
        s.partition(" VALUES ")[2].count("), (") + 1
        for s in statements
        if s.startswith("INSERT INTO inbox")
    ]


async def accept_all(store: SqliteStore, events: list[Inbound]) -> list[object]:
    return list(
        await asyncio.gather(
            *(store.accept(e, home="h", is_command=False) for e in events),
            return_exceptions=True,
        )
    )


async def test_a_burst_is_one_insert_per_batch_and_the_cap_holds(
    sqlite_store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(AcceptWrite, "max_batch", 4)
    statements = await traced(sqlite_store)
    results = await accept_all(sqlite_store, [inbound(f"ev{i}") for i in range(10)])
    assert all(isinstance(r, tuple) and r[1] for r in results)
    # all ten were in flight before the first commit began: one commit, batches of 4, 4, 2
    assert statements.count("COMMIT") == 1
    assert inserted_rows(statements) == [4, 4, 2]
    assert not [s for s in statements if s.startswith("SAVEPOINT one_write")]
    ids = [r[1] and r[0].id for r in results]  # type: ignore[index]
    assert ids == sorted(ids)


async def test_the_default_cap_bounds_a_large_burst(sqlite_store: SqliteStore) -> None:
    statements = await traced(sqlite_store)
    n = 2 * MAX_BATCH + 3
    results = await accept_all(sqlite_store, [inbound(f"ev{i}") for i in range(n)])
    assert all(isinstance(r, tuple) and r[1] for r in results)
    rows = inserted_rows(statements)
    assert sum(rows) == n and max(rows) == MAX_BATCH and len(rows) == 3


async def test_duplicates_inside_a_batch_are_inserted_once(sqlite_store: SqliteStore) -> None:
    await sqlite_store.accept(inbound("stored"), home="h", is_command=False)
    statements = await traced(sqlite_store)
    events = [inbound("a"), inbound("stored"), inbound("a"), inbound("b"), inbound("b")]
    results = await accept_all(sqlite_store, events)
    assert [r[1] for r in results] == [True, False, False, True, False]  # type: ignore[index]
    assert inserted_rows(statements) == [2]  # a and b, in one statement


async def test_an_unencodable_message_fails_alone_after_the_batch_is_undone(
    sqlite_store: SqliteStore, db_path: Path
) -> None:
    statements = await traced(sqlite_store)
    events = [inbound(f"g{i}") for i in range(3)]
    events.insert(1, inbound("bad", text="half a pair \ud800"))
    results = await accept_all(sqlite_store, events)
    assert isinstance(results[1], UnicodeEncodeError), results[1]
    assert "surrogates not allowed" in str(results[1])
    assert all(isinstance(r, tuple) and r[1] for i, r in enumerate(results) if i != 1)
    assert "ROLLBACK TO batch" in statements
    assert statements.count("SAVEPOINT one_write") == 4  # then each alone
    assert statements.count("COMMIT") == 1
    with sqlite3.connect(db_path) as other:  # on disk, as another process sees it
        stored = [row[0] for row in other.execute("SELECT event_id FROM inbox ORDER BY id")]
    assert stored == ["g0", "g1", "g2"]


async def test_a_new_conversation_is_accepted_alone_between_batches(
    sqlite_store: SqliteStore, db_path: Path
) -> None:
    statements = await traced(sqlite_store)
    results = await asyncio.gather(
        sqlite_store.accept(inbound("a1"), home="h", is_command=False),
        sqlite_store.accept(inbound("a2"), home="h", is_command=False),
        sqlite_store.accept(inbound("new"), home="h", is_command=True, starts_epoch=True),
        sqlite_store.accept(inbound("b1"), home="h", is_command=False),
        sqlite_store.accept(inbound("b2"), home="h", is_command=False),
    )
    assert all(new for _, new in results)
    assert inserted_rows(statements) == [2, 1, 2]
    with sqlite3.connect(db_path) as other:
        epochs = dict(other.execute("SELECT event_id, epoch FROM inbox"))
    assert epochs == {"a1": 1, "a2": 1, "new": 2, "b1": 2, "b2": 2}


async def test_a_batched_record_is_what_reading_it_back_gives(sqlite_store: SqliteStore) -> None:
    """The records are built from what was written, not read back: they must be equal."""
    events = [
        inbound("e1", sender_name="Ann", shared_chat=True, part_of="album", text="x\x00y"),
        inbound("e2", is_operator=True, target={"b": [1, 2], "a": {"z": None}}),
    ]
    results = await accept_all(sqlite_store, events)
    for record, new in results:  # type: ignore[misc]
        assert new
        assert await sqlite_store.get_message(record.id) == record
        assert record.state is InboxState.ACCEPTED


# One accept: (event id, thread, target, is_command); a small pool of each, so duplicates
# (of one earlier in the burst, and of one stored before it) and shared threads are common.
accepts = st.lists(
    st.tuples(
        st.sampled_from(["e1", "e2", "e3", "e4", "e5", "e6"]),
        st.sampled_from(["slack:T1:C1:1.0", "slack:T1:C2:1.0", "telegram:b:7"]),
        st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 3), max_size=2),
        st.booleans(),
    ),
    min_size=1,
    max_size=24,
)


def _events(spec: list[tuple[str, str, dict[str, int], bool]]) -> list[tuple[Inbound, bool]]:
    """The accepts ``spec`` describes, each with its is_command."""
    at = 1_700_000_000.0
    return [
        (
            inbound(
                event,
                platform=thread.partition(":")[0],
                thread_key=thread,
                target=dict(target),
                text=f"m{i}",
                received_at=at + i,
            ),
            is_command,
        )
        for i, (event, thread, target, is_command) in enumerate(spec)
    ]


async def _outcome(
    path: Path,
    before: list[tuple[Inbound, bool]],
    burst: list[tuple[Inbound, bool]],
    *,
    together: bool,
) -> tuple[list[object], list[object]]:
    """``before`` accepted one by one, then ``burst`` all at once (``together``) or one by
    one; every answer of the burst and every conversation (less its times)."""
    store = SqliteStore(path)
    await store.open()
    try:
        for event, is_command in before:
            await store.accept(event, home=f"h-{event.thread_key}", is_command=is_command)
        calls = [
            store.accept(e, home=f"h-{e.thread_key}-{i}", is_command=c)
            for i, (e, c) in enumerate(burst)
        ]
        # all in flight at once (one commit, batched), or each awaited before the next
        answers = list(await asyncio.gather(*calls)) if together else [await c for c in calls]
        made = await store.conversations()
        # Conversation ids by rank: one by one, an accept into an existing conversation
        # (an upsert that updates) still uses up an AUTOINCREMENT id, a batch upserts each
        # thread once. Ids only promise to grow in the order rows were written.
        rank = {c.id: i for i, c in enumerate(sorted(made, key=lambda c: c.id))}
        answers = [
            (dataclasses.replace(r, conversation_id=rank[r.conversation_id]), new)
            for r, new in answers
        ]
        conversations = [(rank[c.id], c.thread_key, c.home, c.epoch, c.target) for c in made]
        return answers, conversations
    finally:
        await store.close()


@settings(max_examples=40, deadline=None)
@given(before=accepts, burst=accepts)
def test_a_burst_answers_and_stores_as_the_same_accepts_made_one_by_one(
    before: list[tuple[str, str, dict[str, int], bool]],
    burst: list[tuple[str, str, dict[str, int], bool]],
) -> None:
    first, then = _events(before), _events(burst)
    with tempfile.TemporaryDirectory() as tmp:
        batched = asyncio.run(_outcome(Path(tmp) / "a.db", first, then, together=True))
        one_by_one = asyncio.run(_outcome(Path(tmp) / "b.db", first, then, together=False))
    assert batched == one_by_one
