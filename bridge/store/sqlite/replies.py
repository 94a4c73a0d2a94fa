"""The SQLite store's replies: recorded once per dedupe key, their delivery state, and a
thread's transcript (its messages and replies in the order they happened)."""

from __future__ import annotations

import json
import sqlite3
import time

from ...model import Outgoing, ReplyKind, ReplyState
from ..base import StoreError
from ..records import NewReply, ReplyRecord, TranscriptEntry
from .core import SqliteCore
from .rows import insert_replies, to_reply

_ROLE_BY_KIND = {
    ReplyKind.ANSWER: "assistant",
    ReplyKind.NOTICE: "status",
    ReplyKind.ERROR: "error",
    ReplyKind.PROMPT: "prompt",
    ReplyKind.ARTIFACT: "assistant",
}


class Replies(SqliteCore):
    """Replies and their delivery (see the module docstring)."""

    async def add_replies(self, replies: list[NewReply]) -> list[ReplyRecord]:
        def work(conn: sqlite3.Connection) -> list[ReplyRecord]:
            return insert_replies(conn, replies, time.time())

        return await self._tx(work)

    async def mark_reply(
        self,
        reply_id: int,
        state: ReplyState,
        *,
        platform_ref: str | None = None,
        error: str | None = None,
        soon: bool = False,
    ) -> None:
        def work(conn: sqlite3.Connection) -> None:
            sent_at = time.time() if state is ReplyState.SENT else None
            changed = conn.execute(
                "UPDATE replies SET state = ?,"
                " attempts = attempts + ?,"
                " sent_at = coalesce(?, sent_at),"
                " platform_ref = coalesce(?, platform_ref),"
                " last_error = coalesce(?, last_error)"
                " WHERE id = ?",
                (
                    state.value,
                    1 if state is ReplyState.SENDING else 0,
                    sent_at,
                    platform_ref,
                    error,
                    reply_id,
                ),
            ).rowcount
            if changed != 1:
                raise StoreError(f"store {self.path}: no reply {reply_id}")

        await self._tx(work, soon=soon)

    async def undelivered_replies(self) -> list[ReplyRecord]:
        def work(conn: sqlite3.Connection) -> list[ReplyRecord]:
            rows = conn.execute(
                "SELECT * FROM replies WHERE state IN (?, ?) ORDER BY id",
                (ReplyState.PENDING.value, ReplyState.SENDING.value),
            ).fetchall()
            return [to_reply(r) for r in rows]

        return await self._call(work)

    async def get_reply(self, reply_id: int) -> ReplyRecord | None:
        def work(conn: sqlite3.Connection) -> ReplyRecord | None:
            row = conn.execute("SELECT * FROM replies WHERE id = ?", (reply_id,)).fetchone()
            return None if row is None else to_reply(row)

        return await self._call(work)

    async def transcript(self, thread_key: str, limit: int = 500) -> list[TranscriptEntry]:
        def work(conn: sqlite3.Connection) -> list[TranscriptEntry]:
            # Newest ``limit`` lines by (time, user before reply, id), then turned around.
            rows = conn.execute(
                "WITH conv AS (SELECT id FROM conversations WHERE thread_key = ?)"
                " SELECT * FROM ("
                "  SELECT 0 AS src, id, received_at AS at, text,"
                "   coalesce(nullif(sender_name, ''), sender_id) AS sender,"
                "   id AS message_id, NULL AS outgoing, attachments"
                "  FROM inbox WHERE conversation_id = (SELECT id FROM conv)"
                "  UNION ALL"
                "  SELECT 1 AS src, id, created_at AS at, NULL, NULL, message_id, outgoing, NULL"
                "  FROM replies WHERE conversation_id = (SELECT id FROM conv)"
                "   AND state IN (?, ?, ?)"
                " ) ORDER BY at DESC, src DESC, id DESC LIMIT ?",
                (
                    thread_key,
                    ReplyState.PENDING.value,
                    ReplyState.SENDING.value,
                    ReplyState.SENT.value,
                    limit,
                ),
            ).fetchall()
            entries = []
            for row in reversed(rows):
                if row["src"] == 0:
                    entries.append(
                        TranscriptEntry(
                            role="user",
                            text=row["text"],
                            at=row["at"],
                            sender=row["sender"],
                            message_id=row["message_id"],
                            attachments=json.loads(row["attachments"] or "[]"),
                        )
                    )
                    continue
                out = Outgoing.from_dict(json.loads(row["outgoing"]))
                entries.append(
                    TranscriptEntry(
                        role=_ROLE_BY_KIND[out.kind],
                        text=out.text,
                        at=row["at"],
                        message_id=row["message_id"],
                        reply_id=row["id"],
                        choices=[dict(c.__dict__) for c in out.choices],
                        file_path=out.file_path,
                    )
                )
            return entries

        return await self._call(work)
