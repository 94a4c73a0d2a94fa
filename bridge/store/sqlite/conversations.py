"""The SQLite store's conversations: looked up by id, thread key or key prefix, and the epoch
``/new`` bumps (a fresh Jazz conversation in the same home)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from ...model import InboxState
from ..base import StoreError
from ..records import ConversationRecord, NewReply, ReplyRecord
from .core import SqliteCore
from .rows import insert_replies, to_conversation, to_reply


class Conversations(SqliteCore):
    """Conversations and their epochs (see the module docstring)."""

    async def conversation(self, conversation_id: int) -> ConversationRecord | None:
        def work(conn: sqlite3.Connection) -> ConversationRecord | None:
            row = conn.execute(
                "SELECT * FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
            return None if row is None else to_conversation(row)

        return await self._call(work)

    async def conversation_by_key(self, thread_key: str) -> ConversationRecord | None:
        def work(conn: sqlite3.Connection) -> ConversationRecord | None:
            row = conn.execute(
                "SELECT * FROM conversations WHERE thread_key = ?", (thread_key,)
            ).fetchone()
            return None if row is None else to_conversation(row)

        return await self._call(work)

    async def conversations(self) -> list[ConversationRecord]:
        def work(conn: sqlite3.Connection) -> list[ConversationRecord]:
            rows = conn.execute("SELECT * FROM conversations ORDER BY id").fetchall()
            return [to_conversation(r) for r in rows]

        return await self._call(work)

    async def latest_conversation(self, key_prefix: str) -> ConversationRecord | None:
        def work(conn: sqlite3.Connection) -> ConversationRecord | None:
            # a range on the unique thread_key index (LIKE would need its wildcards escaped)
            row = conn.execute(
                "SELECT * FROM conversations WHERE thread_key >= ? AND thread_key < ?"
                " ORDER BY last_active_at DESC, id DESC LIMIT 1",
                (key_prefix, key_prefix + "\U0010ffff"),
            ).fetchone()
            return None if row is None else to_conversation(row)

        return await self._call(work)

    async def new_epoch(self, conversation_id: int) -> int:
        def work(conn: sqlite3.Connection) -> int:
            row = conn.execute(
                "UPDATE conversations SET epoch = epoch + 1, last_active_at = ? WHERE id = ?"
                " RETURNING epoch",
                (time.time(), conversation_id),
            ).fetchone()
            if row is None:
                raise StoreError(f"store {self.path}: no conversation {conversation_id}")
            return int(row[0])

        return await self._tx(work)

    async def start_new_epoch(
        self, message_id: int, reply: Callable[[int], NewReply]
    ) -> list[ReplyRecord]:
        def work(conn: sqlite3.Connection) -> list[ReplyRecord]:
            now = time.time()
            message = conn.execute(
                "UPDATE inbox SET state = ?, finished_at = ?, error = NULL"
                " WHERE id = ? AND state = ? RETURNING conversation_id, new_epoch",
                (InboxState.DONE.value, now, message_id, InboxState.ACCEPTED.value),
            ).fetchone()
            if message is None:  # answered before: the epoch was bumped then, not again
                if conn.execute("SELECT 1 FROM inbox WHERE id = ?", (message_id,)).fetchone():
                    rows = conn.execute(
                        "SELECT * FROM replies WHERE message_id = ? ORDER BY id", (message_id,)
                    ).fetchall()
                    return [to_reply(r) for r in rows]
                raise StoreError(f"store {self.path}: no message {message_id}")
            if message[1] is not None:  # bumped as it was accepted
                return insert_replies(conn, [reply(int(message[1]))], now)
            epoch = conn.execute(  # accepted by an older jazz-bridge: bumped here, as it did
                "UPDATE conversations SET epoch = epoch + 1, last_active_at = ? WHERE id = ?"
                " RETURNING epoch",
                (now, message[0]),
            ).fetchone()
            if epoch is None:
                raise StoreError(f"store {self.path}: message {message_id} has no conversation")
            return insert_replies(conn, [reply(int(epoch[0]))], now)

        return await self._tx(work)
