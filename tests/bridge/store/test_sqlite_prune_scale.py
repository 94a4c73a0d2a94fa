"""The retention sweep on a big store once held the store's write lock for minutes.

``prune`` deletes old replies and messages ``NOT EXISTS`` a run (or reply) for them, but
neither ``runs.message_id`` nor ``replies.message_id`` was indexed: each old row scanned the
whole runs (and replies) table, so the work grew with the product of the two. On a gateway
with a few months of traffic (the first sweep after an upgrade, or ``records_days`` lowered)
one sweep took minutes in one write transaction, and no message could be accepted meanwhile
(40,000 old turns with 7,000 recent ones: about 40 s). The sweep's work now grows with the
rows it looks at.

Counted in SQLite virtual-machine steps (a progress handler on the store's own connection),
not in seconds, so the verdict does not depend on how busy the machine is.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from bridge.config import RetentionSettings
from bridge.model import Inbound, InboxState, Outgoing, ReplyKind, ReplyState, ReplyTarget
from bridge.retention import DAY_S, Sweeper
from bridge.store import NewReply, RunOutcome, SqliteStore
from provisioning import naming

OLD = 8000  # answered turns older than records_days: pruned
NEW = 3000  # recent turns: kept
STEPS_PER_CALL = 1000


async def _one_turn(store: SqliteStore, key: str) -> None:
    inbound = Inbound(platform="web", event_id="seed", thread_key=key, sender_id="ada", text="hi")
    msg, _ = await store.accept(inbound, home=naming.home_name(key), is_command=False)
    run = await store.start_run(msg.id, "ada", 1)
    outcome = RunOutcome(ok=True, exit_code=0, envelope_code=None)
    reply = NewReply(
        dedupe_key="seed",
        conversation_id=run.conversation_id,
        outgoing=Outgoing(ReplyKind.ANSWER, "hello"),
        target=ReplyTarget(surface="web", thread_key=key, context={}),
        message_id=msg.id,
    )
    [sent] = await store.finish_run(run.id, outcome, InboxState.DONE, [reply])
    await store.mark_reply(sent.id, ReplyState.SENT)


def _copies(path: Path, now: float) -> None:
    """OLD + NEW copies of the seeded turn (message, run, sent reply), straight into the file."""
    db = sqlite3.connect(path)
    try:
        for table in ("inbox", "runs", "replies"):
            cols = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
            template = dict(zip(cols, db.execute(f"SELECT * FROM {table}").fetchone(), strict=True))
            rows = []
            for i in range(2, OLD + NEW + 2):
                at = now - 400 * DAY_S if i < OLD + 2 else now - DAY_S
                row = dict(template, id=i)
                if table == "inbox":
                    row.update(event_id=f"e{i}", received_at=at, finished_at=at)
                elif table == "runs":
                    row.update(message_id=i, started_at=at, finished_at=at)
                else:
                    row.update(dedupe_key=f"d{i}", message_id=i, created_at=at, sent_at=at)
                rows.append(tuple(row[c] for c in cols))
            marks = ",".join("?" * len(cols))
            db.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        db.commit()
    finally:
        db.close()


async def test_a_sweep_over_a_big_store_does_work_in_proportion_to_it(tmp_path: Path) -> None:
    path = tmp_path / "bridge.db"
    store = SqliteStore(path)
    await store.open()
    await _one_turn(store, "web:seed")
    await store.close()
    now = time.time()
    _copies(path, now)

    store = SqliteStore(path)
    await store.open()
    try:
        steps = 0

        def count() -> int:
            nonlocal steps
            steps += STEPS_PER_CALL
            return 0  # go on

        await store._call(lambda conn: conn.set_progress_handler(count, STEPS_PER_CALL))
        sweeper = Sweeper(RetentionSettings(records_days=90), store)
        started = time.monotonic()
        report = await sweeper.sweep(now)
        took = time.monotonic() - started
        await store._call(lambda conn: conn.set_progress_handler(None, 0))
        assert report["pruned"]["messages"] == OLD
        assert report["pruned"]["replies"] == OLD
        budget = 2000 * (OLD + NEW)  # generous: a few hundred steps per row looked at
        assert steps < budget, (
            f"pruning {OLD} old turns beside {NEW} recent ones took {steps:,} SQLite steps "
            f"({took:.1f} s holding the store's write lock; budget {budget:,})"
        )
    finally:
        await store.close()
