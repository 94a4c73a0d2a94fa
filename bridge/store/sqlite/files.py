"""The SQLite store's files: opening the database by the state-file rules of docs/design.md.

A database written by a newer jazz-bridge (``PRAGMA user_version`` above
:data:`~bridge.store.sqlite.schema.SCHEMA_VERSION`) is refused and left untouched; one SQLite
cannot read (not a database, or failing ``PRAGMA quick_check``) is moved aside with its
``-wal``/``-shm`` to ``<name>.corrupt-<UTC timestamp>`` with a warning naming both paths,
and a fresh database is created. The files are never world-readable. A read-only open (an
operator's ``homes list``) creates, repairs, moves and migrates nothing.

Everything here runs on the store's worker thread, before the connection is handed over.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

from provisioning.safefs import corrupt_name, fsync_dir

from ..base import StoreError
from .schema import check_version, ensure_schema, has_tables

log = logging.getLogger(__name__)

SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database
BUSY_TIMEOUT_MS = 5000
STATEMENT_CACHE = 512  # prepared statements kept by the connection (default 128)
STATE_DIR_MODE = 0o750  # a missing parent directory: never world-readable either
SIDE_SUFFIXES = ("-wal", "-shm")  # SQLite's files beside the database in WAL mode

# Primary result codes that mean "this file is not a readable database" (as opposed to
# "locked", "cannot open", "disk full", which must never make us move a database aside).
_UNREADABLE_CODES = frozenset({sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT})


def _is_unreadable(exc: sqlite3.DatabaseError) -> bool:
    if isinstance(exc, sqlite3.OperationalError):
        return False  # locked, busy, cannot open: a condition, not a broken file
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return False
    return (code & 0xFF) in _UNREADABLE_CODES


class DatabaseFile:
    """The database file at ``path`` and the files beside it, kept at ``file_mode``."""

    def __init__(self, path: Path, file_mode: int) -> None:
        self.path = path
        self.file_mode = file_mode

    def open(self, *, read_only: bool) -> sqlite3.Connection:
        """A connection to the file, made, repaired and migrated as needed (``read_only``:
        opened as it is, see :class:`~bridge.store.sqlite.SqliteStore`)."""
        if read_only:
            return self._open_read_only()
        self.path.parent.mkdir(mode=STATE_DIR_MODE, parents=True, exist_ok=True)
        conn, problem = self._connect_checked()
        if conn is None:
            self._move_aside(problem)
            conn, problem = self._connect_checked()
            if conn is None:  # a file we have just created cannot be unreadable
                raise StoreError(f"store {self.path} is unreadable right after creating it")
        try:
            self._configure(conn)
            ensure_schema(conn, self.path)
            self._chmod_files()
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_read_only(self) -> sqlite3.Connection:
        if not self.path.is_file():
            raise StoreError(f"no store at {self.path}")
        uri = f"{self.path.absolute().as_uri()}?mode=ro"
        wal = self.path.with_name(self.path.name + "-wal")
        if not os.access(self.path.parent, os.W_OK) and not wal.exists():
            # No gateway has it open (it would have its -wal file), and a reader who may not
            # write in state/ (an operator in the group) cannot make the -shm a WAL database
            # needs even to be read: read it as an unchanging file instead.
            uri += "&immutable=1"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            version = check_version(conn, self.path)
            if version == 0:
                raise StoreError(f"{self.path} is not a jazz-bridge store (no schema version)")
            problems = [str(row[0]) for row in conn.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise StoreError(self._damaged("quick_check: " + " / ".join(problems[:3])[:300]))
        except sqlite3.DatabaseError as exc:
            conn.close()
            if _is_unreadable(exc):
                raise StoreError(self._damaged(str(exc))) from None
            raise
        except BaseException:
            conn.close()
            raise
        return conn

    def _damaged(self, why: str) -> str:
        return (
            f"store {self.path} is damaged ({why}); it was left as it is: the gateway moves it "
            "aside (and starts an empty one) at its next start"
        )

    def _connect_checked(self) -> tuple[sqlite3.Connection | None, str]:
        """Connect and check the file: ``(connection, "")``, or ``(None, why)`` if unreadable.

        Nothing here writes, so a database that is refused keeps its bytes.
        """
        self._create_file()
        # Judge the header ourselves first: SQLite, handed a file that is not a database
        # but has a -wal beside it, deletes that -wal on close, and it belongs in the
        # corrupt set as evidence.
        with open(self.path, "rb") as fh:
            header = fh.read(len(SQLITE_HEADER))
        if header and header != SQLITE_HEADER:
            return None, "not a SQLite database (wrong file header)"
        conn = sqlite3.connect(
            self.path,
            isolation_level=None,
            timeout=BUSY_TIMEOUT_MS / 1000,
            check_same_thread=True,
            # a batch of accepts has statements of its own size (up to MAX_BATCH rows): room
            # for all of them beside the store's others, so none is prepared again per batch
            cached_statements=STATEMENT_CACHE,
        )
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            version = check_version(conn, self.path)
            if version == 0 and has_tables(conn):
                raise StoreError(
                    f"{self.path} is a SQLite database of something else (it has tables "
                    "but no jazz-bridge schema version); it was left untouched"
                )
            problems = [str(row[0]) for row in conn.execute("PRAGMA quick_check")]
        except sqlite3.DatabaseError as exc:
            conn.close()
            if not _is_unreadable(exc):
                raise
            return None, str(exc)
        except BaseException:
            conn.close()
            raise
        if problems != ["ok"]:
            conn.close()
            return None, "quick_check: " + " / ".join(problems[:3])[:400]
        return conn, ""

    def _create_file(self) -> None:
        """Create a missing database file with the right mode before SQLite writes to it."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, self.file_mode)
        except FileExistsError:
            return
        try:
            os.fchmod(fd, self.file_mode)  # the umask may have narrowed it
        finally:
            os.close(fd)
        fsync_dir(self.path.parent)

    def _move_aside(self, problem: str) -> None:
        target = corrupt_name(self.path)
        os.replace(self.path, target)
        for suffix in SIDE_SUFFIXES:
            side = self.path.with_name(self.path.name + suffix)
            try:
                os.replace(side, target.with_name(target.name + suffix))
            except FileNotFoundError:
                pass
        fsync_dir(self.path.parent)
        log.warning(
            "store database %s is unreadable (%s); moved it aside to %s and starting a "
            "fresh, empty database: accepted messages and undelivered replies in the old "
            "file are NOT recovered",
            self.path,
            problem,
            target,
        )

    def _configure(self, conn: sqlite3.Connection) -> None:
        mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        if mode.lower() != "wal":
            log.warning("store %s: journal_mode is %s, not wal", self.path, mode)
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        # what is deleted or overwritten (a typed secret, redacted) is zeroed in the file,
        # not left in a free page an operator's copy of bridge.db would still hold
        conn.execute("PRAGMA secure_delete = ON")

    def _chmod_files(self) -> None:
        for suffix in ("", *SIDE_SUFFIXES):
            try:
                os.chmod(self.path.with_name(self.path.name + suffix), self.file_mode)
            except FileNotFoundError:
                pass
