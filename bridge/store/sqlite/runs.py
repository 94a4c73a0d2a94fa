"""The SQLite store's runs: a message's run started and finished (with its outcome, the
message's final state and its replies in the same transaction), and what runs are counted
for (conversations started per person and team, the daily spend)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

from ...model import InboxState
from ..base import StoreError
from ..records import NewReply, ReplyRecord, RunOutcome, RunRecord
from .core import SqliteCore
from .rows import insert_replies, merge_parts, to_run


class Runs(SqliteCore):
    """Runs of the agent (see the module docstring)."""

    async def start_run(self, message_id: int, requester: str, epoch: int) -> RunRecord:
        def work(conn: sqlite3.Connection) -> RunRecord:
            now = time.time()
            message = conn.execute(
                "UPDATE inbox SET state = ?, started_at = ?, finished_at = NULL, error = NULL"
                " WHERE id = ? RETURNING conversation_id",
                (InboxState.RUNNING.value, now, message_id),
            ).fetchone()
            if message is None:
                raise StoreError(f"store {self.path}: no message {message_id}")
            row = conn.execute(
                "INSERT INTO runs (conversation_id, message_id, requester, epoch, started_at)"
                " VALUES (?, ?, ?, ?, ?) RETURNING *",
                (message[0], message_id, requester, epoch, now),
            ).fetchone()
            return to_run(row)

        return await self._tx(work)

    async def begin_run(
        self, message_id: int, requester: str, *, parts: Sequence[int] = ()
    ) -> RunRecord | None:
        def work(conn: sqlite3.Connection) -> RunRecord | None:
            now = time.time()
            message = conn.execute(
                "UPDATE inbox SET state = ?, started_at = ?, finished_at = NULL, error = NULL"
                " WHERE id = ? AND state = ? RETURNING conversation_id, epoch",
                (InboxState.RUNNING.value, now, message_id, InboxState.ACCEPTED.value),
            ).fetchone()
            if message is None:
                return None
            # the epoch the message was written in (a /new after it does not move it)
            row = conn.execute(
                "INSERT INTO runs (conversation_id, message_id, requester, epoch, started_at)"
                " SELECT ?, ?, ?, coalesce(?, epoch), ? FROM conversations WHERE id = ?"
                " RETURNING *",
                (message[0], message_id, requester, message[1], now, message[0]),
            ).fetchone()
            if row is None:
                raise StoreError(f"store {self.path}: message {message_id} has no conversation")
            merge_parts(conn, parts, now)
            return to_run(row)

        return await self._tx(work)

    async def finish_run(
        self,
        run_id: int,
        outcome: RunOutcome,
        message_state: InboxState,
        replies: list[NewReply],
    ) -> list[ReplyRecord]:
        def work(conn: sqlite3.Connection) -> list[ReplyRecord]:
            now = time.time()
            run = conn.execute(
                "UPDATE runs SET finished_at = ?, ok = ?, exit_code = ?, envelope_code = ?,"
                " error = ?, cost_usd = ?, cost_known = ?, prompt_tokens = ?,"
                " completion_tokens = ?, total_tokens = ?, duration_ms = ?, tool_count = ?,"
                " stopped_by = ?"
                " WHERE id = ? RETURNING message_id",
                (
                    now,
                    int(outcome.ok),
                    outcome.exit_code,
                    outcome.envelope_code,
                    outcome.error,
                    outcome.cost_usd,
                    int(outcome.cost_known),
                    outcome.prompt_tokens,
                    outcome.completion_tokens,
                    outcome.total_tokens,
                    outcome.duration_ms,
                    outcome.tool_count,
                    outcome.stopped_by,
                    run_id,
                ),
            ).fetchone()
            if run is None:
                raise StoreError(f"store {self.path}: no run {run_id}")
            conn.execute(
                "UPDATE inbox SET state = ?, finished_at = ? WHERE id = ?",
                (message_state.value, now, run[0]),
            )
            return insert_replies(conn, replies, now)

        return await self._tx(work)

    async def runs(self, conversation_id: int, limit: int = 20) -> list[RunRecord]:
        def work(conn: sqlite3.Connection) -> list[RunRecord]:
            rows = conn.execute(
                "SELECT * FROM runs WHERE conversation_id = ? ORDER BY id DESC LIMIT ?",
                (conversation_id, limit),
            ).fetchall()
            return [to_run(r) for r in rows]

        return await self._call(work)

    async def conversations_started(
        self, conversation_id: int, requester: str, group: str, since: float
    ) -> tuple[bool, int, int]:
        prefix = group + ":"

        def work(conn: sqlite3.Connection) -> tuple[bool, int, int]:
            ran = conn.execute(
                "SELECT 1 FROM runs WHERE conversation_id = ? LIMIT 1", (conversation_id,)
            ).fetchone()
            by_requester, by_group = conn.execute(
                "SELECT count(CASE WHEN first = ? THEN 1 END),"
                " count(CASE WHEN thread_key = ? OR substr(thread_key, 1, ?) = ? THEN 1 END)"
                " FROM (SELECT c.thread_key, (SELECT requester FROM runs"
                "  WHERE conversation_id = c.id ORDER BY id LIMIT 1) AS first"
                "  FROM conversations c WHERE c.created_at >= ?)"
                " WHERE first IS NOT NULL",
                (requester, group, len(prefix), prefix, since),
            ).fetchone()
            return ran is not None, int(by_requester), int(by_group)

        return await self._call(work)

    async def cost_since(self, since: float) -> tuple[float, int]:
        def work(conn: sqlite3.Connection) -> tuple[float, int]:
            total, unpriced = conn.execute(
                "SELECT coalesce(sum(CASE WHEN cost_known THEN cost_usd END), 0.0),"
                " count(CASE WHEN NOT cost_known THEN 1 END)"
                " FROM runs WHERE finished_at IS NOT NULL AND finished_at >= ?",
                (since,),
            ).fetchone()
            return float(total), int(unpriced)

        return await self._call(work)
