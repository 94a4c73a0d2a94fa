"""The store contract's test suite: every test that takes ``store`` or ``backend`` runs once
per backend in :data:`BACKENDS`, and must pass on each (the contract is
:mod:`bridge.store.base`). A new backend (PostgreSQL) is one more entry there: a context
manager making a :class:`Backend` on a database of the test's own.

The SQLite backend's own behaviour (its files, modes, schema and pragmas) is tested in
``test_sqlite*.py`` through ``db_path`` and ``sqlite_store``, which are not parametrised.

Test modules here are named ``test_store_*`` and ``test_sqlite*``: pytest imports test
files by their base name (there are no packages under ``tests/``), so a name must be unique
in the whole tree (``tests/bridge/engine`` has a ``test_prompts.py``, ``tests/bridge`` a
``test_retention.py``).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from store_support import Backend

from bridge.store import SqliteStore, Store


@contextlib.contextmanager
def sqlite_backend(tmp_path: Path) -> Iterator[Backend]:
    path = tmp_path / "state" / "bridge.db"  # the parent does not exist yet

    def count(table: str) -> int:
        with contextlib.closing(sqlite3.connect(path)) as conn:
            return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def set_last_active(thread_key: str, at: float) -> None:
        with contextlib.closing(sqlite3.connect(path)) as conn, conn:
            conn.execute(
                "UPDATE conversations SET last_active_at = ? WHERE thread_key = ?",
                (at, thread_key),
            )

    yield Backend("sqlite", lambda: SqliteStore(path), count, set_last_active)


BACKENDS: dict[str, Callable[[Path], AbstractContextManager[Backend]]] = {
    "sqlite": sqlite_backend,
}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with BACKENDS[request.param](tmp_path) as made:
        yield made


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    """An open store of each backend, closed after the test."""
    s = backend.make()
    await s.open()
    try:
        yield s
    finally:
        await s.close()


# -- the SQLite backend's own tests ----------------------------------------------------------


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "bridge.db"  # the parent does not exist yet


@pytest.fixture
async def sqlite_store(db_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(db_path)
    await s.open()
    try:
        yield s
    finally:
        await s.close()
