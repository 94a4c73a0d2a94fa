"""The SQLite store's small adapter state: string values by key (a Telegram update offset)."""

from __future__ import annotations

import sqlite3

from .core import SqliteCore


class AdapterState(SqliteCore):
    """String values by key (see the module docstring)."""

    async def get_kv(self, key: str) -> str | None:
        def work(conn: sqlite3.Connection) -> str | None:
            row = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
            return None if row is None else str(row[0])

        return await self._call(work)

    async def set_kv(self, key: str, value: str) -> None:
        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO kv (key, value) VALUES (?, ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

        await self._tx(work)
