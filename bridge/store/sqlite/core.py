"""The SQLite store's one connection: its worker thread and the group commit of writes.

Every call to SQLite runs on one dedicated worker thread that owns the only connection;
the async methods hand work to it with ``run_in_executor`` and never block the event loop.
Because that thread runs one job at a time, concurrent asyncio tasks are serialized for
free; ``BEGIN IMMEDIATE`` transactions also keep another process (an operator's
``sqlite3`` shell, ``jazz-bridge homes``) from interleaving a write. If an awaiting task is
cancelled, a job the worker already started still runs to the end (one still queued may
be dropped): either way a transaction is committed or rolled back whole, never half.

:class:`SqliteCore` is the base the store's parts (intake, runs, replies...) are built on:
they read with :meth:`SqliteCore._call` and write with :meth:`SqliteCore._tx`. A write that
is a :class:`Batchable` (an accept) may be made together with its neighbours of one commit
in one set of statements (see :meth:`SqliteCore._group_on_worker`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from provisioning.modes import STATE_FILE_MODE

from ..base import Store, StoreError, StoreFull, StoreStats, StoreUnavailable
from .files import DatabaseFile

log = logging.getLogger(__name__)

T = TypeVar("T")

SOON_S = 0.05  # how long a ``soon`` write waits for another write to share its commit
MAX_BATCH = 64  # writes made as one set of statements at most (their statements' size)

Write = Callable[[sqlite3.Connection], Any]
Outcome = tuple[bool, Any]  # (True, what the write returned) or (False, why it failed)


class Batchable(Generic[T]):
    """A write that may be made together with its neighbours of the same class.

    Called alone (``write(conn)``) it is one write, as any other. A commit holding several
    in a row makes them with :meth:`many` instead: for an accept, one dedupe lookup, one
    conversation upsert and one multi-row insert for the lot, where each alone cost a
    savepoint and five statements on the store's thread, holding the GIL the event loop
    needs for the requests (issue 23). The batch is undone as a whole if it fails.

    A plain base class, not an ABC: every write of a commit is asked ``isinstance``, and an
    ABC answers that in Python.
    """

    max_batch: ClassVar[int] = MAX_BATCH

    @property
    def batchable(self) -> bool:
        """False for a write of this class that must be made alone (an accept's ``/new``)."""
        return True

    def __call__(self, conn: sqlite3.Connection) -> T:
        """The write alone (also the fallback when :meth:`many` failed)."""
        raise NotImplementedError

    @classmethod
    def many(cls, conn: sqlite3.Connection, writes: Sequence[Any]) -> list[T]:
        """``writes`` (of this class, in order; each batchable, or just one) made as each
        alone would have been made, one after the other; their answers in that order.
        Raising undoes them all, and each is then made alone (a bad one fails by itself)."""
        raise NotImplementedError


def batches(fns: Sequence[Write]) -> Iterator[Sequence[Write]]:
    """``fns`` in order, as runs to make together: consecutive batchable writes of one
    class (at most its ``max_batch``), every other write a run of its own."""
    i = 0
    while i < len(fns):
        end = i + 1
        first = fns[i]
        if isinstance(first, Batchable) and first.batchable:
            while end < len(fns) and end - i < first.max_batch and _joins(first, fns[end]):
                end += 1
        yield fns[i:end]
        i = end


def _joins(first: Batchable[Any], fn: Write) -> bool:
    """``fn`` may be made in one batch with ``first``: a batchable write of its class."""
    return type(fn) is type(first) and isinstance(fn, Batchable) and fn.batchable


class SqliteCore(Store):
    """The connection, its worker and the group commit (see the module docstring); the
    store's parts subclass it and :class:`~bridge.store.sqlite.SqliteStore` joins them."""

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
        self._group: list[tuple[Write, asyncio.Future[Any]]] = []
        self._committer: asyncio.Task[None] | None = None
        # writes that may wait for another to share its commit (see _tx's ``soon``)
        self._waiting: list[tuple[Write, asyncio.Future[Any]]] = []
        self._waiting_timer: asyncio.TimerHandle | None = None
        self.stats = StoreStats()

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

    async def _tx(self, fn: Callable[[sqlite3.Connection], T], *, soon: bool = False) -> T:
        """Run ``fn`` as one write; writes arriving while a commit is on the disk share the next.

        Group commit: with ``synchronous=FULL`` every COMMIT waits for the disk, so one
        transaction per write made intake as slow as the disk's flush (about 100 a second on
        a busy disk), and a turn makes several (the run started, its outcome and replies,
        each reply sent). Each write runs in a savepoint of its own (one that fails fails
        alone), or with the batchable writes next to it in one (a :class:`Batchable`: if the
        batch fails, each is made again alone); its caller hears back only after the COMMIT
        that holds it returned, so nothing is acknowledged before it is on disk.

        ``soon``: the write does not start a commit of its own; it joins the next other
        write's, or after ``SOON_S`` commits alone (and at close). For a write whose caller
        does not wait on it (a reply's "sent" mark, awaited before that conversation's next
        delivery): in a conversation answered one message at a time the next write comes
        within milliseconds, so a commit and its disk flush per message are saved.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if soon:
            self._waiting.append((fn, future))
            if self._waiting_timer is None:
                self._waiting_timer = loop.call_later(SOON_S, self._commit_waiting)
        else:
            self._group.append((fn, future))
            self._start_committer()
        return await future

    def _start_committer(self) -> None:
        if self._committer is None or self._committer.done():
            self._committer = asyncio.create_task(self._commit_groups(), name="store-commit")

    def _commit_waiting(self) -> None:
        """Hand the waiting ``soon`` writes to a commit now (their time is up, or closing)."""
        if self._waiting_timer is not None:
            self._waiting_timer.cancel()
            self._waiting_timer = None
        if self._waiting:
            self._start_committer()

    def _take_group(
        self,
    ) -> list[tuple[Write, asyncio.Future[Any]]]:
        """The next commit's writes: the waiting ``soon`` ones first (they came earlier)."""
        group, self._waiting, self._group = [*self._waiting, *self._group], [], []
        if self._waiting_timer is not None:
            self._waiting_timer.cancel()
            self._waiting_timer = None
        return group

    async def _commit_groups(self) -> None:
        while self._group or self._waiting:
            group = self._take_group()
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

    def _group_on_worker(self, conn: sqlite3.Connection, fns: list[Write]) -> list[Outcome]:
        """One transaction for ``fns``: each write in a savepoint of its own, or consecutive
        batchable ones in one for the run (see :func:`batches`); then the COMMIT."""
        outcomes: list[Outcome] = []
        conn.execute("BEGIN IMMEDIATE")
        try:
            for run in batches(fns):
                if len(run) == 1:
                    outcomes.append(self._one_on_worker(conn, run[0]))
                else:
                    outcomes += self._batch_on_worker(conn, run)
            conn.execute("COMMIT")
            self.stats.commits += 1
            self.stats.writes += len(fns)
        except BaseException:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    log.exception("store %s: rollback failed", self.path)
            raise
        return outcomes

    def _one_on_worker(self, conn: sqlite3.Connection, fn: Write) -> Outcome:
        """``fn`` in a savepoint: one that fails is undone, and fails alone."""
        conn.execute("SAVEPOINT one_write")
        try:
            outcome: Outcome = (True, fn(conn))
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK TO one_write")
            outcome = (False, self._store_error(exc))
        except Exception as exc:  # the write's own refusal: undone, and its alone
            conn.execute("ROLLBACK TO one_write")
            outcome = (False, exc)
        conn.execute("RELEASE one_write")
        return outcome

    def _batch_on_worker(self, conn: sqlite3.Connection, run: Sequence[Write]) -> list[Outcome]:
        """``run`` (batchable writes of one class) made together in one savepoint; if that
        fails for any reason, it is undone and each write is made alone, so the others
        still land and the one at fault gets its own error, as without batching."""
        kind = type(run[0])
        assert issubclass(kind, Batchable)
        conn.execute("SAVEPOINT batch")
        try:
            values = kind.many(conn, run)
        except Exception:
            conn.execute("ROLLBACK TO batch")
            conn.execute("RELEASE batch")
            log.debug("store %s: a batch of %d failed; each is made alone", self.path, len(run))
            return [self._one_on_worker(conn, fn) for fn in run]
        conn.execute("RELEASE batch")
        return [(True, value) for value in values]

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
        if self._waiting and self._executor is not None:
            self._commit_waiting()
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
            self._conn = DatabaseFile(self.path, self.file_mode).open(read_only=self.read_only)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {self.path}: {exc}") from exc
        except OSError as exc:
            raise StoreError(f"cannot open store {self.path}: {exc}") from exc
