"""The embedded store: :class:`bridge.store.base.Store` on one SQLite file.

This is what ``jazz-bridge serve`` uses with no configuration: a single gateway process
owns the database. It exists so that an inbound message can be persisted durably before
the platform is acknowledged (WAL, ``synchronous=FULL``: a commit that returned survives a
power cut) and so that recovery after a crash finds every accepted message and every
undelivered reply.

Every call to SQLite runs on one dedicated worker thread that owns the only connection;
the async methods hand work to it with ``run_in_executor`` and never block the event loop.
Because that thread runs one job at a time, concurrent asyncio tasks are serialized for
free; ``BEGIN IMMEDIATE`` transactions also keep another process (an operator's
``sqlite3`` shell, ``jazz-bridge homes``) from interleaving a write. If an awaiting task is
cancelled, a job the worker already started still runs to the end (one still queued may
be dropped): either way a transaction is committed or rolled back whole, never half.

Opening follows the state-file rules of docs/design.md: a database written by a newer
jazz-bridge (``PRAGMA user_version`` above :data:`SCHEMA_VERSION`) is refused and left
untouched; one SQLite cannot read (not a database, or failing ``PRAGMA quick_check``) is
moved aside with its ``-wal``/``-shm`` to ``<name>.corrupt-<UTC timestamp>`` with a warning
naming both paths, and a fresh database is created. The files are never world-readable.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from provisioning.modes import STATE_FILE_MODE
from provisioning.safefs import corrupt_name, fsync_dir

from ..model import Inbound, InboxState, Outgoing, ReplyKind, ReplyState, ReplyTarget
from .base import (
    ConversationRecord,
    MessageRecord,
    NewReply,
    PromptRecord,
    ReplyRecord,
    RunOutcome,
    RunRecord,
    Store,
    StoreError,
    StoreFull,
    StoreSchemaTooNew,
    StoreUnavailable,
    TranscriptEntry,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

SCHEMA_VERSION = 4
"""The schema this code writes (``PRAGMA user_version``); bump it with a migration."""

SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database
BUSY_TIMEOUT_MS = 5000
STATE_DIR_MODE = 0o750  # a missing parent directory: never world-readable either
SIDE_SUFFIXES = ("-wal", "-shm")  # SQLite's files beside the database in WAL mode

# _MIGRATIONS[v - 1] takes a version-v store to version v + 1.
_MIGRATIONS = (
    # 2: the conversation epoch a message was written in, so a message sent before /new
    # runs in the conversation it was written for (NULL for older rows: the current one)
    "ALTER TABLE inbox ADD COLUMN epoch INTEGER",
    # 3: the epoch a /new started, bumped as it was accepted (NULL: not bumped yet, as an
    # older jazz-bridge did it only when it answered)
    "ALTER TABLE inbox ADD COLUMN new_epoch INTEGER",
    # 4: the message a part belongs to when the platform delivers one in parts (a Telegram
    # album): its parts run as one turn, also when they are requeued after a restart
    "ALTER TABLE inbox ADD COLUMN part_of TEXT",
)
assert len(_MIGRATIONS) == SCHEMA_VERSION - 1

# Made at every open when missing (no schema version: an older jazz-bridge just keeps them).
# Without them every "a run (a reply) of this message?" scanned the whole table: prune, on
# a store of a few months, held the write lock for minutes.
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS runs_by_message ON runs (message_id)",
    "CREATE INDEX IF NOT EXISTS replies_by_message ON replies (message_id)",
)

# Primary result codes that mean "this file is not a readable database" (as opposed to
# "locked", "cannot open", "disk full", which must never make us move a database aside).
_UNREADABLE_CODES = frozenset({sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT})

_SCHEMA_V1 = """
CREATE TABLE conversations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_key TEXT NOT NULL UNIQUE,
    platform TEXT NOT NULL,
    home TEXT NOT NULL,
    epoch INTEGER NOT NULL DEFAULT 1,
    created_at REAL NOT NULL,
    last_active_at REAL NOT NULL,
    target TEXT NOT NULL DEFAULT '{}'
);

CREATE TABLE inbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id),
    platform TEXT NOT NULL,
    event_id TEXT NOT NULL,
    thread_key TEXT NOT NULL,
    sender_id TEXT NOT NULL,
    sender_name TEXT,
    text TEXT NOT NULL,
    attachments TEXT NOT NULL DEFAULT '[]',
    shared_chat INTEGER NOT NULL DEFAULT 0,
    is_operator INTEGER NOT NULL DEFAULT 0,
    is_command INTEGER NOT NULL DEFAULT 0,
    target TEXT NOT NULL DEFAULT '{}',
    state TEXT NOT NULL,
    received_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    error TEXT,
    UNIQUE (platform, event_id)
);
CREATE INDEX inbox_by_state ON inbox (state, id);
CREATE INDEX inbox_by_conversation_state ON inbox (conversation_id, state);

CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id),
    message_id INTEGER NOT NULL REFERENCES inbox(id),
    requester TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL,
    ok INTEGER,
    exit_code INTEGER,
    envelope_code TEXT,
    error TEXT,
    cost_usd REAL NOT NULL DEFAULT 0,
    cost_known INTEGER NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    total_tokens INTEGER NOT NULL DEFAULT 0,
    duration_ms INTEGER NOT NULL DEFAULT 0,
    tool_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX runs_by_conversation ON runs (conversation_id, id);
CREATE INDEX runs_by_finished_at ON runs (finished_at);

CREATE TABLE replies (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dedupe_key TEXT NOT NULL UNIQUE,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id),
    message_id INTEGER REFERENCES inbox(id),
    outgoing TEXT NOT NULL,
    target TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    sent_at REAL,
    platform_ref TEXT,
    last_error TEXT
);
CREATE INDEX replies_by_state ON replies (state, id);
CREATE INDEX replies_by_conversation ON replies (conversation_id, id);

CREATE TABLE prompts (
    token TEXT PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id),
    conversation_id INTEGER NOT NULL REFERENCES conversations(id),
    requester TEXT NOT NULL,
    kind TEXT NOT NULL,
    request_id TEXT NOT NULL,
    payload TEXT NOT NULL DEFAULT '{}',
    state TEXT NOT NULL DEFAULT 'pending',
    created_at REAL NOT NULL,
    answered_at REAL,
    answer TEXT
);
CREATE INDEX prompts_by_run_state ON prompts (run_id, state);
CREATE INDEX prompts_by_conversation_state ON prompts (conversation_id, state);

CREATE TABLE kv (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""

_ROLE_BY_KIND = {
    ReplyKind.ANSWER: "assistant",
    ReplyKind.NOTICE: "status",
    ReplyKind.ERROR: "error",
    ReplyKind.PROMPT: "prompt",
    ReplyKind.ARTIFACT: "assistant",
}


def _checkpoint_truncate(conn: sqlite3.Connection) -> None:
    busy, _frames, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:
        log.info("a checkpoint was held up by a reader; the write-ahead log empties later")


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _is_unreadable(exc: sqlite3.DatabaseError) -> bool:
    if isinstance(exc, sqlite3.OperationalError):
        return False  # locked, busy, cannot open: a condition, not a broken file
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return False
    return (code & 0xFF) in _UNREADABLE_CODES


class SqliteStore(Store):
    """The durable store on one SQLite file at ``path`` (see the module docstring)."""

    def __init__(
        self, path: Path, *, file_mode: int = STATE_FILE_MODE, read_only: bool = False
    ) -> None:
        """``read_only``: for commands that only look (``homes list``/``show``): the file is
        opened as it is, never created, repaired, moved aside or migrated, so an operator
        in the group (who may read it, not write it) can use it beside a running gateway."""
        if file_mode & 0o007:
            raise ValueError(f"store file mode {file_mode:#o} would be world-accessible")
        self.path = Path(path)
        self.file_mode = file_mode
        self.read_only = read_only
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None  # touched only on the worker thread
        # group commit of every write (see _tx)
        self._group: list[tuple[Callable[[sqlite3.Connection], Any], asyncio.Future[Any]]] = []
        self._committer: asyncio.Task[None] | None = None

    # -- plumbing -----------------------------------------------------------------------------
    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` on the worker thread; SQLite errors become StoreError."""
        executor = self._executor
        if executor is None:
            raise StoreError(f"store {self.path} is not open")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, self._on_worker, fn)

    def _on_worker(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._conn
        if conn is None:
            raise StoreError(f"store {self.path} is not open")
        try:
            return fn(conn)
        except sqlite3.Error as exc:
            raise self._store_error(exc) from exc

    def _store_error(self, exc: sqlite3.Error) -> StoreError:
        if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) == sqlite3.SQLITE_FULL:
            return StoreFull(f"store {self.path}: the disk is full ({exc}); nothing was written")
        if isinstance(exc, sqlite3.OperationalError):  # busy, locked, I/O: a condition
            return StoreUnavailable(f"store {self.path}: {exc}")
        return StoreError(f"store {self.path}: {exc}")

    async def _tx(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` as one write; writes arriving while a commit is on the disk share the next.

        Group commit: with ``synchronous=FULL`` every COMMIT waits for the disk, so one
        transaction per write made intake as slow as the disk's flush (about 100 a second on
        a busy disk), and a turn makes several (the run started, its outcome and replies,
        each reply sent). Each write runs in a savepoint of its own (one that fails fails
        alone); its caller hears back only after the COMMIT that holds it returned, so
        nothing is acknowledged before it is on disk.
        """
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._group.append((fn, future))
        if self._committer is None or self._committer.done():
            self._committer = asyncio.create_task(self._commit_groups(), name="store-commit")
        return await future

    async def _commit_groups(self) -> None:
        while self._group:
            group, self._group = self._group, []
            fns = [fn for fn, _ in group]
            try:
                outcomes = await self._call(functools.partial(self._group_on_worker, fns=fns))
            except BaseException as exc:  # the transaction failed: nothing of it was written
                for _, future in group:
                    if not future.done():
                        future.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            for (_, future), (ok, value) in zip(group, outcomes, strict=True):
                if future.done():  # its caller gave up; the write stands (dedupe keys it)
                    continue
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)

    def _group_on_worker(
        self, conn: sqlite3.Connection, fns: list[Callable[[sqlite3.Connection], Any]]
    ) -> list[tuple[bool, Any]]:
        outcomes: list[tuple[bool, Any]] = []
        conn.execute("BEGIN IMMEDIATE")
        try:
            for fn in fns:
                conn.execute("SAVEPOINT one_write")
                try:
                    outcomes.append((True, fn(conn)))
                except sqlite3.Error as exc:
                    conn.execute("ROLLBACK TO one_write")
                    outcomes.append((False, self._store_error(exc)))
                except Exception as exc:  # the write's own refusal: undone, and its alone
                    conn.execute("ROLLBACK TO one_write")
                    outcomes.append((False, exc))
                conn.execute("RELEASE one_write")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    log.exception("store %s: rollback failed", self.path)
            raise
        return outcomes

    # -- open / close -------------------------------------------------------------------------
    async def open(self) -> None:
        if self._executor is not None:
            return
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jazz-store")
        # Set at once: calls made while opening queue behind the open on the one worker.
        self._executor = executor
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(executor, self._open_on_worker)
        except BaseException:
            # Refused, failed or cancelled: whatever the worker opened, it closes.
            self._executor = None
            executor.submit(self._close_on_worker)
            executor.shutdown(wait=False)
            raise

    async def close(self) -> None:
        if self._committer is not None:  # writes already handed in are committed first
            await asyncio.shield(asyncio.gather(self._committer, return_exceptions=True))
        executor, self._executor = self._executor, None
        if executor is None:
            return
        # Queued behind every call already made; new calls are refused from here on.
        closed = executor.submit(self._close_on_worker)
        executor.shutdown(wait=False)  # the worker finishes its queue, then exits
        # Shielded: a cancelled close() must not drop the queued close of the connection.
        await asyncio.shield(asyncio.wrap_future(closed))

    def _close_on_worker(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _open_on_worker(self) -> None:
        try:
            self._conn = self._open_sync()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {self.path}: {exc}") from exc
        except OSError as exc:
            raise StoreError(f"cannot open store {self.path}: {exc}") from exc

    def _open_sync(self) -> sqlite3.Connection:
        if self.read_only:
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
            self._ensure_schema(conn)
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
            version = self._version(conn)
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

    def _version(self, conn: sqlite3.Connection) -> int:
        """The file's schema version; StoreSchemaTooNew when this code does not know it."""
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StoreSchemaTooNew(
                f"store {self.path} has schema version {version}, newer than "
                f"{SCHEMA_VERSION} which this jazz-bridge understands; it was left "
                "untouched: upgrade jazz-bridge or point it at another database"
            )
        return version

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
        )
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            version = self._version(conn)
            if version == 0 and self._has_tables(conn):
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

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Read again under the write lock: another process may have created it.
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise StoreSchemaTooNew(
                    f"store {self.path} has schema version {version}, newer than "
                    f"{SCHEMA_VERSION} which this jazz-bridge understands"
                )
            if version == 0:
                if self._has_tables(conn):
                    raise StoreError(
                        f"{self.path} is a SQLite database of something else (it has tables "
                        "but no jazz-bridge schema version); it was left untouched"
                    )
                for statement in _SCHEMA_V1.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                version = 1
            # Migrations from older versions, each inside this transaction.
            for migration in _MIGRATIONS[version - 1 :]:
                conn.execute(migration)
            for index in _INDEXES:
                conn.execute(index)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @staticmethod
    def _has_tables(conn: sqlite3.Connection) -> bool:
        row = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()
        return bool(row[0])

    def _chmod_files(self) -> None:
        for suffix in ("", *SIDE_SUFFIXES):
            try:
                os.chmod(self.path.with_name(self.path.name + suffix), self.file_mode)
            except FileNotFoundError:
                pass

    # -- row conversion -----------------------------------------------------------------------
    @staticmethod
    def _message(row: sqlite3.Row) -> MessageRecord:
        return MessageRecord(
            id=row["id"],
            conversation_id=row["conversation_id"],
            platform=row["platform"],
            event_id=row["event_id"],
            thread_key=row["thread_key"],
            sender_id=row["sender_id"],
            sender_name=row["sender_name"],
            text=row["text"],
            attachments=json.loads(row["attachments"]),
            shared_chat=bool(row["shared_chat"]),
            is_operator=bool(row["is_operator"]),
            is_command=bool(row["is_command"]),
            target=json.loads(row["target"]),
            state=InboxState(row["state"]),
            received_at=row["received_at"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            error=row["error"],
            part_of=row["part_of"],
            starts_epoch=row["new_epoch"] is not None,
        )

    @staticmethod
    def _conversation(row: sqlite3.Row) -> ConversationRecord:
        return ConversationRecord(
            id=row["id"],
            thread_key=row["thread_key"],
            platform=row["platform"],
            home=row["home"],
            epoch=row["epoch"],
            created_at=row["created_at"],
            last_active_at=row["last_active_at"],
            target=json.loads(row["target"]),
        )

    @staticmethod
    def _run(row: sqlite3.Row) -> RunRecord:
        outcome = None
        if row["finished_at"] is not None:
            outcome = RunOutcome(
                ok=bool(row["ok"]),
                exit_code=row["exit_code"],
                envelope_code=row["envelope_code"],
                error=row["error"],
                cost_usd=row["cost_usd"],
                cost_known=bool(row["cost_known"]),
                prompt_tokens=row["prompt_tokens"],
                completion_tokens=row["completion_tokens"],
                total_tokens=row["total_tokens"],
                duration_ms=row["duration_ms"],
                tool_count=row["tool_count"],
            )
        return RunRecord(
            id=row["id"],
            conversation_id=row["conversation_id"],
            message_id=row["message_id"],
            requester=row["requester"],
            epoch=row["epoch"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            outcome=outcome,
        )

    @staticmethod
    def _reply(row: sqlite3.Row) -> ReplyRecord:
        target = json.loads(row["target"])
        return ReplyRecord(
            id=row["id"],
            dedupe_key=row["dedupe_key"],
            conversation_id=row["conversation_id"],
            message_id=row["message_id"],
            outgoing=Outgoing.from_dict(json.loads(row["outgoing"])),
            target=ReplyTarget(
                surface=target["surface"],
                thread_key=target["thread_key"],
                context=target.get("context", {}),
            ),
            state=ReplyState(row["state"]),
            attempts=row["attempts"],
            created_at=row["created_at"],
            sent_at=row["sent_at"],
            platform_ref=row["platform_ref"],
            last_error=row["last_error"],
        )

    @staticmethod
    def _prompt(row: sqlite3.Row) -> PromptRecord:
        answer = row["answer"]
        return PromptRecord(
            token=row["token"],
            run_id=row["run_id"],
            conversation_id=row["conversation_id"],
            requester=row["requester"],
            kind=row["kind"],
            request_id=row["request_id"],
            payload=json.loads(row["payload"]),
            state=row["state"],
            created_at=row["created_at"],
            answered_at=row["answered_at"],
            answer=None if answer is None else json.loads(answer),
        )

    def _insert_replies(
        self, conn: sqlite3.Connection, replies: list[NewReply], now: float
    ) -> list[ReplyRecord]:
        records = []
        for reply in replies:
            conn.execute(
                "INSERT INTO replies (dedupe_key, conversation_id, message_id, outgoing, target,"
                " state, attempts, created_at) VALUES (?, ?, ?, ?, ?, ?, 0, ?)"
                " ON CONFLICT (dedupe_key) DO NOTHING",
                (
                    reply.dedupe_key,
                    reply.conversation_id,
                    reply.message_id,
                    _dumps(reply.outgoing.as_dict()),
                    _dumps(
                        {
                            "surface": reply.target.surface,
                            "thread_key": reply.target.thread_key,
                            "context": reply.target.context,
                        }
                    ),
                    ReplyState.PENDING.value,
                    now,
                ),
            )
            row = conn.execute(
                "SELECT * FROM replies WHERE dedupe_key = ?", (reply.dedupe_key,)
            ).fetchone()
            records.append(self._reply(row))
        return records

    # -- intake -------------------------------------------------------------------------------
    async def accept(
        self, inbound: Inbound, *, home: str, is_command: bool, starts_epoch: bool = False
    ) -> tuple[MessageRecord, bool]:
        def work(conn: sqlite3.Connection) -> tuple[MessageRecord, bool]:
            existing = conn.execute(
                "SELECT * FROM inbox WHERE platform = ? AND event_id = ?",
                (inbound.platform, inbound.event_id),
            ).fetchone()
            if existing is not None:
                return self._message(existing), False
            now = time.time()
            target = _dumps(inbound.target)
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
                    _dumps([a.as_dict() for a in inbound.attachments]),
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
            return self._message(row), True

        return await self._tx(work)

    async def get_message(self, message_id: int) -> MessageRecord | None:
        def work(conn: sqlite3.Connection) -> MessageRecord | None:
            row = conn.execute("SELECT * FROM inbox WHERE id = ?", (message_id,)).fetchone()
            return None if row is None else self._message(row)

        return await self._call(work)

    async def messages_in_state(self, state: InboxState) -> list[MessageRecord]:
        def work(conn: sqlite3.Connection) -> list[MessageRecord]:
            rows = conn.execute(
                "SELECT * FROM inbox WHERE state = ? ORDER BY id", (state.value,)
            ).fetchall()
            return [self._message(r) for r in rows]

        return await self._call(work)

    async def unanswered_messages(self) -> list[MessageRecord]:
        def work(conn: sqlite3.Connection) -> list[MessageRecord]:
            rows = conn.execute(
                "SELECT * FROM inbox WHERE state IN (?, ?) AND NOT EXISTS"
                " (SELECT 1 FROM replies y WHERE y.conversation_id = inbox.conversation_id"
                " AND y.message_id = inbox.id) ORDER BY id",
                (InboxState.INTERRUPTED.value, InboxState.FAILED.value),
            ).fetchall()
            return [self._message(r) for r in rows]

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
            self._merge_parts(conn, parts, now)
            return self._insert_replies(conn, replies, now)

        return await self._tx(work)

    async def redact_message(self, message_id: int, text: str = "[redacted]") -> None:
        def work(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE inbox SET text = ? WHERE id = ?", (text, message_id))

        await self._tx(work)
        # The old text is still in the write-ahead log (bridge.db-wal, which the operator
        # group reads) until a checkpoint: copied into the file (where secure_delete zeroes
        # it) and the log emptied now. Best effort: a reader holding an old snapshot keeps
        # the log until the next checkpoint.
        await self._call(_checkpoint_truncate)

    # -- conversations ------------------------------------------------------------------------
    async def conversation(self, conversation_id: int) -> ConversationRecord | None:
        def work(conn: sqlite3.Connection) -> ConversationRecord | None:
            row = conn.execute(
                "SELECT * FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
            return None if row is None else self._conversation(row)

        return await self._call(work)

    async def conversation_by_key(self, thread_key: str) -> ConversationRecord | None:
        def work(conn: sqlite3.Connection) -> ConversationRecord | None:
            row = conn.execute(
                "SELECT * FROM conversations WHERE thread_key = ?", (thread_key,)
            ).fetchone()
            return None if row is None else self._conversation(row)

        return await self._call(work)

    async def conversations(self) -> list[ConversationRecord]:
        def work(conn: sqlite3.Connection) -> list[ConversationRecord]:
            rows = conn.execute("SELECT * FROM conversations ORDER BY id").fetchall()
            return [self._conversation(r) for r in rows]

        return await self._call(work)

    async def latest_conversation(self, key_prefix: str) -> ConversationRecord | None:
        def work(conn: sqlite3.Connection) -> ConversationRecord | None:
            # a range on the unique thread_key index (LIKE would need its wildcards escaped)
            row = conn.execute(
                "SELECT * FROM conversations WHERE thread_key >= ? AND thread_key < ?"
                " ORDER BY last_active_at DESC, id DESC LIMIT 1",
                (key_prefix, key_prefix + "\U0010ffff"),
            ).fetchone()
            return None if row is None else self._conversation(row)

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
                    return [self._reply(r) for r in rows]
                raise StoreError(f"store {self.path}: no message {message_id}")
            if message[1] is not None:  # bumped as it was accepted
                return self._insert_replies(conn, [reply(int(message[1]))], now)
            epoch = conn.execute(  # accepted by an older jazz-bridge: bumped here, as it did
                "UPDATE conversations SET epoch = epoch + 1, last_active_at = ? WHERE id = ?"
                " RETURNING epoch",
                (now, message[0]),
            ).fetchone()
            if epoch is None:
                raise StoreError(f"store {self.path}: message {message_id} has no conversation")
            return self._insert_replies(conn, [reply(int(epoch[0]))], now)

        return await self._tx(work)

    # -- runs ---------------------------------------------------------------------------------
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
            return self._run(row)

        return await self._tx(work)

    @staticmethod
    def _merge_parts(conn: sqlite3.Connection, parts: Sequence[int], now: float) -> None:
        """Close the other parts of a message as ``merged`` (those still ``accepted``)."""
        conn.executemany(
            "UPDATE inbox SET state = ?, started_at = ?, finished_at = ?"
            " WHERE id = ? AND state = ?",
            [
                (InboxState.MERGED.value, now, now, part, InboxState.ACCEPTED.value)
                for part in parts
            ],
        )

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
            self._merge_parts(conn, parts, now)
            return self._run(row)

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
                " completion_tokens = ?, total_tokens = ?, duration_ms = ?, tool_count = ?"
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
                    run_id,
                ),
            ).fetchone()
            if run is None:
                raise StoreError(f"store {self.path}: no run {run_id}")
            conn.execute(
                "UPDATE inbox SET state = ?, finished_at = ? WHERE id = ?",
                (message_state.value, now, run[0]),
            )
            return self._insert_replies(conn, replies, now)

        return await self._tx(work)

    async def runs(self, conversation_id: int, limit: int = 20) -> list[RunRecord]:
        def work(conn: sqlite3.Connection) -> list[RunRecord]:
            rows = conn.execute(
                "SELECT * FROM runs WHERE conversation_id = ? ORDER BY id DESC LIMIT ?",
                (conversation_id, limit),
            ).fetchall()
            return [self._run(r) for r in rows]

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

    # -- replies ------------------------------------------------------------------------------
    async def add_replies(self, replies: list[NewReply]) -> list[ReplyRecord]:
        def work(conn: sqlite3.Connection) -> list[ReplyRecord]:
            return self._insert_replies(conn, replies, time.time())

        return await self._tx(work)

    async def mark_reply(
        self,
        reply_id: int,
        state: ReplyState,
        *,
        platform_ref: str | None = None,
        error: str | None = None,
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

        await self._tx(work)

    async def undelivered_replies(self) -> list[ReplyRecord]:
        def work(conn: sqlite3.Connection) -> list[ReplyRecord]:
            rows = conn.execute(
                "SELECT * FROM replies WHERE state IN (?, ?) ORDER BY id",
                (ReplyState.PENDING.value, ReplyState.SENDING.value),
            ).fetchall()
            return [self._reply(r) for r in rows]

        return await self._call(work)

    async def get_reply(self, reply_id: int) -> ReplyRecord | None:
        def work(conn: sqlite3.Connection) -> ReplyRecord | None:
            row = conn.execute("SELECT * FROM replies WHERE id = ?", (reply_id,)).fetchone()
            return None if row is None else self._reply(row)

        return await self._call(work)

    async def transcript(self, thread_key: str, limit: int = 500) -> list[TranscriptEntry]:
        def work(conn: sqlite3.Connection) -> list[TranscriptEntry]:
            # Newest ``limit`` lines by (time, user before reply, id), then turned around.
            rows = conn.execute(
                "WITH conv AS (SELECT id FROM conversations WHERE thread_key = ?)"
                " SELECT * FROM ("
                "  SELECT 0 AS src, id, received_at AS at, text,"
                "   coalesce(nullif(sender_name, ''), sender_id) AS sender,"
                "   id AS message_id, NULL AS outgoing"
                "  FROM inbox WHERE conversation_id = (SELECT id FROM conv)"
                "  UNION ALL"
                "  SELECT 1 AS src, id, created_at AS at, NULL, NULL, message_id, outgoing"
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

    # -- prompts ------------------------------------------------------------------------------
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
                        _dumps(p.payload),
                        p.state,
                        p.created_at or now,
                        p.answered_at,
                        None if p.answer is None else _dumps(p.answer),
                    )
                    for p in prompts
                ],
            )

        await self._tx(work)

    async def get_prompt(self, token: str) -> PromptRecord | None:
        def work(conn: sqlite3.Connection) -> PromptRecord | None:
            row = conn.execute("SELECT * FROM prompts WHERE token = ?", (token,)).fetchone()
            return None if row is None else self._prompt(row)

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
                (state, time.time(), _dumps(answer), token),
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
            return [self._prompt(r) for r in rows]

        return await self._call(work)

    # -- small adapter state ------------------------------------------------------------------
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
