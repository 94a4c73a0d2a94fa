"""The SQLite store's retention: old records deleted in one transaction, never one still
owed (a reply not delivered, a message not answered, a run in flight, a pending prompt)."""

from __future__ import annotations

import sqlite3

from ...model import InboxState, ReplyState
from .core import SqliteCore


class Retention(SqliteCore):
    """Pruning old records (see the module docstring)."""

    async def prune(self, before: float) -> dict[str, int]:
        answered = (
            InboxState.DONE.value,
            InboxState.FAILED.value,
            InboxState.INTERRUPTED.value,
            InboxState.MERGED.value,
        )
        finished = (ReplyState.SENT.value, ReplyState.FAILED.value)

        def work(conn: sqlite3.Connection) -> dict[str, int]:
            counts = {
                "prompts": conn.execute(
                    "DELETE FROM prompts WHERE state != 'pending' AND run_id IN"
                    " (SELECT id FROM runs WHERE finished_at IS NOT NULL AND finished_at < ?)",
                    (before,),
                ).rowcount,
                "runs": conn.execute(
                    "DELETE FROM runs WHERE finished_at IS NOT NULL AND finished_at < ?"
                    " AND NOT EXISTS (SELECT 1 FROM prompts p WHERE p.run_id = runs.id)",
                    (before,),
                ).rowcount,
                # not the replies of a message a kept run holds back: a message kept with
                # none would read as never answered (recovery answers those)
                "replies": conn.execute(
                    "DELETE FROM replies WHERE created_at < ? AND state IN (?, ?)"
                    " AND NOT EXISTS"
                    " (SELECT 1 FROM runs r WHERE r.message_id = replies.message_id)",
                    (before, *finished),
                ).rowcount,
                "messages": conn.execute(
                    "DELETE FROM inbox WHERE state IN (?, ?, ?, ?)"
                    " AND coalesce(finished_at, received_at) < ?"
                    " AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.message_id = inbox.id)"
                    " AND NOT EXISTS (SELECT 1 FROM replies y WHERE y.message_id = inbox.id)",
                    (*answered, before),
                ).rowcount,
            }
            return counts

        return await self._tx(work)
