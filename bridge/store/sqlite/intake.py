"""The SQLite store's intake: inbound messages accepted (deduplicated by platform and event
id), read back for recovery, and closed with their replies when answered without a run."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from ...model import Inbound, InboxState
from ..base import StoreError
from ..records import MessageRecord, NewReply, ReplyRecord
from .core import SqliteCore
from .rows import dumps, insert_replies, merge_parts, to_message

log = logging.getLogger(__name__)


def _checkpoint_truncate(conn: sqlite3.Connection) -> None:
    busy, _frames, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:
        log.info("a checkpoint was held up by a reader; the write-ahead log empties later")


class Intake(SqliteCore):
    """Inbound messages (see the module docstring)."""

    async def accept(
        self, inbound: Inbound, *, home: str, is_command: bool, starts_epoch: bool = False
    ) -> tuple[MessageRecord, bool]:
        def work(conn: sqlite3.Connection) -> tuple[MessageRecord, bool]:
            existing = conn.execute(
                "SELECT * FROM inbox WHERE platform = ? AND event_id = ?",
                (inbound.platform, inbound.event_id),
            ).fetchone()
            if existing is not None:
                return to_message(existing), False
            now = time.time()
            target = dumps(inbound.target)
            conversation_id, epoch = conn.execute(
                "INSERT INTO conversations (thread_key, platform, home, epoch, created_at,"
                " last_active_at, target) VALUES (?, ?, ?, 1, ?, ?, ?)"
                " ON CONFLICT (thread_key) DO UPDATE SET"
                " last_active_at = excluded.last_active_at, target = excluded.target"
                " RETURNING id, epoch",
                (inbound.thread_key, inbound.platform, home, now, now, target),
            ).fetchone()
            new_epoch = None
            if starts_epoch:  # /new: what comes after it is of the fresh conversation
                new_epoch = epoch = conn.execute(
                    "UPDATE conversations SET epoch = epoch + 1 WHERE id = ? RETURNING epoch",
                    (conversation_id,),
                ).fetchone()[0]
            row = conn.execute(
                "INSERT INTO inbox (conversation_id, platform, event_id, thread_key, sender_id,"
                " sender_name, text, attachments, shared_chat, is_operator, is_command, target,"
                " state, received_at, epoch, new_epoch, part_of)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " RETURNING *",
                (
                    conversation_id,
                    inbound.platform,
                    inbound.event_id,
                    inbound.thread_key,
                    inbound.sender_id,
                    inbound.sender_name,
                    inbound.text,
                    dumps([a.as_dict() for a in inbound.attachments]),
                    int(inbound.shared_chat),
                    int(inbound.is_operator),
                    int(is_command),
                    target,
                    InboxState.ACCEPTED.value,
                    inbound.received_at,
                    epoch,
                    new_epoch,
                    inbound.part_of,
                ),
            ).fetchone()
            return to_message(row), True

        return await self._tx(work)

    async def get_message(self, message_id: int) -> MessageRecord | None:
        def work(conn: sqlite3.Connection) -> MessageRecord | None:
            row = conn.execute("SELECT * FROM inbox WHERE id = ?", (message_id,)).fetchone()
            return None if row is None else to_message(row)

        return await self._call(work)

    async def messages_in_state(self, state: InboxState) -> list[MessageRecord]:
        def work(conn: sqlite3.Connection) -> list[MessageRecord]:
            rows = conn.execute(
                "SELECT * FROM inbox WHERE state = ? ORDER BY id", (state.value,)
            ).fetchall()
            return [to_message(r) for r in rows]

        return await self._call(work)

    async def unanswered_messages(self) -> list[MessageRecord]:
        def work(conn: sqlite3.Connection) -> list[MessageRecord]:
            rows = conn.execute(
                "SELECT * FROM inbox WHERE state IN (?, ?) AND NOT EXISTS"
                " (SELECT 1 FROM replies y WHERE y.conversation_id = inbox.conversation_id"
                " AND y.message_id = inbox.id) ORDER BY id",
                (InboxState.INTERRUPTED.value, InboxState.FAILED.value),
            ).fetchall()
            return [to_message(r) for r in rows]

        return await self._call(work)

    async def count_in_state(self, conversation_id: int, state: InboxState) -> int:
        def work(conn: sqlite3.Connection) -> int:
            return int(
                conn.execute(
                    "SELECT count(*) FROM inbox WHERE conversation_id = ? AND state = ?",
                    (conversation_id, state.value),
                ).fetchone()[0]
            )

        return await self._call(work)

    async def complete_message(
        self,
        message_id: int,
        state: InboxState,
        replies: list[NewReply],
        error: str | None = None,
        *,
        parts: Sequence[int] = (),
    ) -> list[ReplyRecord]:
        def work(conn: sqlite3.Connection) -> list[ReplyRecord]:
            now = time.time()
            changed = conn.execute(
                "UPDATE inbox SET state = ?, finished_at = ?, error = ? WHERE id = ?",
                (state.value, now, error, message_id),
            ).rowcount
            if changed != 1:
                raise StoreError(f"store {self.path}: no message {message_id}")
            merge_parts(conn, parts, now)
            return insert_replies(conn, replies, now)

        return await self._tx(work)

    async def saved_attachments(self, message_id: int, attachments: list[dict[str, Any]]) -> None:
        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE inbox SET attachments = ? WHERE id = ?", (dumps(attachments), message_id)
            )

        await self._tx(work)

    async def redact_message(self, message_id: int, text: str = "[redacted]") -> None:
        def work(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE inbox SET text = ? WHERE id = ?", (text, message_id))

        await self._tx(work)
        # The old text is still in the write-ahead log (bridge.db-wal, which the operator
        # group reads) until a checkpoint: copied into the file (where secure_delete zeroes
        # it) and the log emptied now. Best effort: a reader holding an old snapshot keeps
        # the log until the next checkpoint.
        await self._call(_checkpoint_truncate)
