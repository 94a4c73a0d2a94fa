"""The SQLite store's prompts: the questions a run asks a person (approvals, input,
secrets), answered or expired once each."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from ...model import InboxState
from ..records import PromptRecord
from .core import SqliteCore
from .rows import dumps, to_prompt


class Prompts(SqliteCore):
    """A run's questions to a person (see the module docstring)."""

    async def add_prompts(self, prompts: list[PromptRecord]) -> None:
        def work(conn: sqlite3.Connection) -> None:
            now = time.time()
            conn.executemany(
                "INSERT INTO prompts (token, run_id, conversation_id, requester, kind,"
                " request_id, payload, state, created_at, answered_at, answer)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        p.token,
                        p.run_id,
                        p.conversation_id,
                        p.requester,
                        p.kind,
                        p.request_id,
                        dumps(p.payload),
                        p.state,
                        p.created_at or now,
                        p.answered_at,
                        None if p.answer is None else dumps(p.answer),
                    )
                    for p in prompts
                ],
            )

        await self._tx(work)

    async def get_prompt(self, token: str) -> PromptRecord | None:
        def work(conn: sqlite3.Connection) -> PromptRecord | None:
            row = conn.execute("SELECT * FROM prompts WHERE token = ?", (token,)).fetchone()
            return None if row is None else to_prompt(row)

        return await self._call(work)

    async def albums_answered_without_run(self) -> list[tuple[int, str, str]]:
        answered = (InboxState.FAILED.value, InboxState.DONE.value)

        def work(conn: sqlite3.Connection) -> list[tuple[int, str, str]]:
            rows = conn.execute(
                "SELECT DISTINCT a.conversation_id, a.sender_id, a.part_of FROM inbox a"
                " WHERE a.state = ? AND a.part_of IS NOT NULL AND EXISTS"
                " (SELECT 1 FROM inbox b WHERE b.conversation_id = a.conversation_id"
                " AND b.sender_id = a.sender_id AND b.part_of = a.part_of AND b.id < a.id"
                " AND b.state IN (?, ?)"
                " AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.message_id = b.id))",
                (InboxState.ACCEPTED.value, *answered),
            ).fetchall()
            return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]

        return await self._call(work)

    async def answering_messages(self, message_ids: Sequence[int]) -> set[int]:
        wanted = set(message_ids)
        if not wanted:
            return set()

        def work(conn: sqlite3.Connection) -> set[int]:
            found: set[int] = set()
            rows = conn.execute(
                "SELECT answer FROM prompts WHERE state = 'answered' AND answer LIKE ?",
                ('%"byMessage"%',),
            )
            for (raw,) in rows:
                try:
                    by = json.loads(raw).get("byMessage")
                except (ValueError, TypeError, AttributeError):
                    continue
                if isinstance(by, int) and by in wanted:
                    found.add(by)
            return found

        return await self._call(work)

    async def resolve_prompt(
        self, token: str, answer: dict[str, Any], *, expired: bool = False
    ) -> bool:
        state = "expired" if expired else "answered"

        def work(conn: sqlite3.Connection) -> bool:
            changed = conn.execute(
                "UPDATE prompts SET state = ?, answered_at = ?, answer = ?"
                " WHERE token = ? AND state = 'pending'",
                (state, time.time(), dumps(answer), token),
            ).rowcount
            return changed == 1

        return await self._tx(work)

    async def expire_prompts(self, run_id: int | None = None) -> int:
        def work(conn: sqlite3.Connection) -> int:
            if run_id is None:
                cursor = conn.execute(
                    "UPDATE prompts SET state = 'expired' WHERE state = 'pending'"
                )
            else:
                cursor = conn.execute(
                    "UPDATE prompts SET state = 'expired' WHERE state = 'pending' AND run_id = ?",
                    (run_id,),
                )
            return cursor.rowcount

        return await self._tx(work)

    async def pending_prompts(self, conversation_id: int | None) -> list[PromptRecord]:
        def work(conn: sqlite3.Connection) -> list[PromptRecord]:
            if conversation_id is None:
                rows = conn.execute(
                    "SELECT * FROM prompts WHERE state = 'pending' ORDER BY created_at, rowid"
                ).fetchall()
            else:  # the (conversation_id, state) index
                rows = conn.execute(
                    "SELECT * FROM prompts WHERE conversation_id = ? AND state = 'pending'"
                    " ORDER BY created_at, rowid",
                    (conversation_id,),
                ).fetchall()
            return [to_prompt(r) for r in rows]

        return await self._call(work)
