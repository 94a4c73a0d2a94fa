"""The SQLite backend's own behaviour, beyond the store contract: its group commit and its
worker thread, WAL and durability as another connection sees them, the state-file rules
(file modes, a newer schema refused, a foreign or unreadable file), migrations of older
schemas, and a redacted message's old text gone from every file."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import stat
import threading
from pathlib import Path

import pytest
from store_support import inbound, reply

from bridge.model import Inbound, InboxState, ReplyState
from bridge.store import RunOutcome, SqliteStore, StoreError, StoreSchemaTooNew
from bridge.store.sqlite import core as sqlite_core
from bridge.store.sqlite.schema import _MIGRATIONS, SCHEMA_V1, SCHEMA_VERSION

SECRET = "correct-horse-battery-staple-4242"


async def test_concurrent_accepts_share_commits_and_fail_alone(
    sqlite_store: SqliteStore, db_path: Path
) -> None:
    """Group commit: accepts in flight together share COMMITs; one that fails fails alone,
    and every accept that returned is on disk (another connection sees it)."""
    commits: list[str] = []

    def trace(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)

    await sqlite_store._call(trace)
    good = [inbound(f"g{i}", thread_key=f"slack:T1:C1:{i}.0") for i in range(30)]
    bad = inbound("bad", thread_key="slack:T1:C1:bad")
    results = await asyncio.gather(
        *(sqlite_store.accept(e, home="h", is_command=False) for e in good[:15]),
        sqlite_store.accept(bad, home=None, is_command=False),  # type: ignore[arg-type]
        *(sqlite_store.accept(e, home="h", is_command=False) for e in good[15:]),
        return_exceptions=True,
    )
    assert isinstance(results[15], StoreError), results[15]
    assert all(isinstance(r, tuple) and r[1] for i, r in enumerate(results) if i != 15)
    assert 1 <= len(commits) < len(good)
    # what /metrics exports: every COMMIT and every write it held, the failed one too
    assert sqlite_store.stats.commits == len(commits)
    assert sqlite_store.stats.writes == len(good) + 1
    with sqlite3.connect(db_path) as other:
        stored = {row[0] for row in other.execute("SELECT event_id FROM inbox")}
    assert stored == {f"g{i}" for i in range(30)}


async def test_sqlite_runs_off_the_event_loop_thread(sqlite_store: SqliteStore) -> None:
    worker = await sqlite_store._call(lambda conn: threading.get_ident())
    assert worker != threading.get_ident()


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
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5


def _version_4_store(db_path: Path) -> None:
    """A store as jazz-bridge wrote it before runs kept who stopped them (schema 4), with
    one finished run."""
    db_path.parent.mkdir()
    conn = sqlite3.connect(db_path)
    conn.executescript(SCHEMA_V1)
    for migration in _MIGRATIONS[:3]:
        conn.execute(migration)
    conn.execute(
        "INSERT INTO conversations (thread_key, platform, home, epoch, created_at,"
        " last_active_at) VALUES ('slack:T1:C1:1.0', 'slack', 'h', 1, 0, 0)"
    )
    conn.execute(
        "INSERT INTO inbox (conversation_id, platform, event_id, thread_key, sender_id, text,"
        " state, received_at) VALUES (1, 'slack', 'old', 'slack:T1:C1:1.0', 'U1', 'hi',"
        " 'failed', 0)"
    )
    conn.execute(
        "INSERT INTO runs (conversation_id, message_id, requester, epoch, started_at,"
        " finished_at, ok, envelope_code, error) VALUES (1, 1, 'U1', 1, 0, 1, 0,"
        " 'interrupted', 'interrupted by SIGTERM')"
    )
    conn.execute("PRAGMA user_version = 4")
    conn.commit()
    conn.close()


async def test_a_version_4_store_keeps_who_stopped_a_run_once_migrated(db_path: Path) -> None:
    """Migration 5 adds runs.stopped_by: an older run reads None (nobody known), a new one
    keeps it."""
    _version_4_store(db_path)
    s = SqliteStore(db_path)
    await s.open()
    try:
        [old] = await s.runs(1)
        assert old.outcome is not None and old.outcome.stopped_by is None
        assert old.outcome.error == "interrupted by SIGTERM"
        new, _ = await s.accept(inbound("new"), home="h", is_command=False)
        run = await s.begin_run(new.id, "U1")
        assert run is not None
        stopped = RunOutcome(False, None, "interrupted", stopped_by="Ada (/stop)")
        await s.finish_run(run.id, stopped, InboxState.FAILED, [])
        assert (await s.runs(1, limit=1))[0].outcome == stopped
    finally:
        await s.close()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


async def test_a_version_4_store_is_read_as_it_is_by_a_read_only_open(db_path: Path) -> None:
    """``homes list``/``show`` open the store read-only and never migrate it: a store the
    gateway has not migrated yet (it was upgraded, not restarted) still reads, its runs
    stopped by nobody known."""
    _version_4_store(db_path)
    s = SqliteStore(db_path, read_only=True)
    await s.open()
    try:
        [old] = await s.runs(1)
        assert old.outcome is not None and old.outcome.stopped_by is None
    finally:
        await s.close()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 4  # left as it was


async def test_durable_once_accept_returns(sqlite_store: SqliteStore, db_path: Path) -> None:
    rec, _ = await sqlite_store.accept(inbound("ev1"), home="h", is_command=False)
    other = sqlite3.connect(db_path)
    try:
        row = other.execute("SELECT event_id, state FROM inbox WHERE id = ?", (rec.id,)).fetchone()
        modes = other.execute("PRAGMA journal_mode").fetchone()
    finally:
        other.close()
    assert row == ("ev1", "accepted")
    assert modes == ("wal",)


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


async def test_a_redacted_secret_is_in_no_file_of_the_store(tmp_path: Path) -> None:
    """A redacted message (a typed secret) leaves no copy in the store's files.

    The row was overwritten with "[redacted]", but the old text stayed in the write-ahead log
    (``bridge.db-wal``, readable by the operator group) for as long as the gateway ran, and in
    the freed page of the database file after a checkpoint: a person told "removed from the
    gateway's records" had it in any copy an operator made.
    """
    db = tmp_path / "bridge.db"
    store = SqliteStore(db)
    await store.open()
    try:
        typed = Inbound(
            platform="web", event_id="e1", thread_key="web:t", sender_id="u", text=SECRET
        )
        msg, _ = await store.accept(typed, home="web-t", is_command=False)
        await store.redact_message(msg.id)
        files = sorted(p for p in tmp_path.iterdir() if p.name.startswith("bridge.db"))
        holding = [p.name for p in files if SECRET.encode() in p.read_bytes()]
        assert holding == [], f"the secret is still in {holding} (of {[p.name for p in files]})"
        stored = await store.get_message(msg.id)
        assert stored is not None and stored.text == "[redacted]"
    finally:
        await store.close()


async def test_a_mark_written_soon_shares_the_next_writes_commit(
    sqlite_store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply's "sent" mark handed in ``soon`` starts no commit of its own: the next write
    (the next message's intake, in a conversation answered one at a time) carries it."""
    monkeypatch.setattr(sqlite_core, "SOON_S", 60.0)  # past any pause of a loaded machine
    m, _ = await sqlite_store.accept(inbound("ev1"), home="h", is_command=False)
    (sent,) = await sqlite_store.add_replies([reply("a", m.conversation_id)])
    before = sqlite_store.stats.commits
    marking = asyncio.ensure_future(sqlite_store.mark_reply(sent.id, ReplyState.SENT, soon=True))
    await asyncio.sleep(0)  # one loop turn: the task hands the write in (not a timed wait)
    await sqlite_store.accept(inbound("ev2"), home="h", is_command=False)
    await asyncio.wait_for(marking, timeout=10)
    assert sqlite_store.stats.commits == before + 1
    stored = await sqlite_store.get_reply(sent.id)
    assert stored is not None and stored.state is ReplyState.SENT
