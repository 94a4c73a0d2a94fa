"""The SQLite store's intake: inbound messages accepted (deduplicated by platform and event
id), read back for recovery, and closed with their replies when answered without a run.

Accepts that share a commit are made together (:class:`AcceptWrite`, a
:class:`~.core.Batchable`): one dedupe lookup, one conversation upsert and one multi-row
insert for the batch. Durability is the commit's, as for any write: no caller hears back
before the COMMIT holding its message returned.
"""

from __future__ import annotations

import functools
import json
import logging
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...model import Inbound, InboxState
from ..base import StoreError
from ..records import MessageRecord, NewReply, ReplyRecord
from .core import Batchable, SqliteCore
from .rows import dumps, insert_replies, merge_parts, to_message

log = logging.getLogger(__name__)

EventKey = tuple[str, str]  # (platform, event_id): the inbox's unique dedupe key
Accepted = tuple[MessageRecord, bool]

_INBOX_COLUMNS = (
    "conversation_id, platform, event_id, thread_key, sender_id, sender_name, text,"
    " attachments, shared_chat, is_operator, is_command, target, state, received_at, epoch,"
    " new_epoch, part_of"
)
_INBOX_ROW = "(" + ", ".join("?" * 17) + ")"
_CONVERSATION_ROW = "(?, ?, ?, 1, ?, ?, ?)"


# The batch statements below are built for a number of rows: only "?" placeholders are
# pasted in, never a value (S608 is about values).


@functools.cache
def _select_stored_sql(n: int) -> str:
    marks = ", ".join("?" * n)
    return f"SELECT * FROM inbox WHERE platform = ? AND event_id IN ({marks})"  # noqa: S608


_UPSERT_CONVERSATIONS = (
    "INSERT INTO conversations (thread_key, platform, home, epoch, created_at, last_active_at,"
    " target) VALUES {rows} ON CONFLICT (thread_key) DO UPDATE SET"
    " last_active_at = excluded.last_active_at, target = excluded.target"
    " RETURNING thread_key, id, epoch"
)


@functools.cache
def _upsert_conversations_sql(n: int) -> str:
    return _UPSERT_CONVERSATIONS.format(rows=", ".join([_CONVERSATION_ROW] * n))


@functools.cache
def _insert_messages_sql(n: int) -> str:
    # RETURNING's rows come in no promised order: each is matched by its event key
    rows = ", ".join([_INBOX_ROW] * n)
    return f"INSERT INTO inbox ({_INBOX_COLUMNS}) VALUES {rows} RETURNING id, platform, event_id"  # noqa: S608


def _checkpoint_truncate(conn: sqlite3.Connection) -> None:
    busy, _frames, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:
        log.info("a checkpoint was held up by a reader; the write-ahead log empties later")


@dataclass(frozen=True)
class AcceptWrite(Batchable[Accepted]):
    """One :meth:`Store.accept <bridge.store.base.Store.accept>`, made alone or with the
    accepts next to it in its commit: either way each answers as if made one after the
    other in call order (a duplicate of one earlier in the batch gets that one's record)."""

    inbound: Inbound
    home: str
    is_command: bool
    starts_epoch: bool

    @property
    def key(self) -> EventKey:
        return (self.inbound.platform, self.inbound.event_id)

    @functools.cached_property
    def target(self) -> str:
        """The reply target as stored (the conversation's and the message's: encoded once)."""
        return dumps(self.inbound.target)

    @property
    def batchable(self) -> bool:
        # a /new bumps the epoch every later message of its conversation gets: made alone,
        # the accepts after it (in the next run) read the bumped epoch
        return not self.starts_epoch

    def __call__(self, conn: sqlite3.Connection) -> Accepted:
        return self.many(conn, [self])[0]

    @classmethod
    def many(cls, conn: sqlite3.Connection, writes: Sequence[AcceptWrite]) -> list[Accepted]:
        assert len(writes) == 1 or not any(w.starts_epoch for w in writes)
        stored = _stored_messages(conn, writes)
        fresh: dict[EventKey, AcceptWrite] = {}  # the first of each event not stored yet
        for write in writes:
            if write.key not in stored:
                fresh.setdefault(write.key, write)
        made = _insert_messages(conn, list(fresh.values()))
        answers: list[Accepted] = []
        for write in writes:
            if write.key in stored:  # a redelivery, or the repeat of an ambiguous commit
                answers.append((stored[write.key], False))
            else:  # new, or a duplicate of one made earlier in this batch
                answers.append((made[write.key], fresh[write.key] is write))
        return answers


def _stored_messages(
    conn: sqlite3.Connection, writes: Sequence[AcceptWrite]
) -> dict[EventKey, MessageRecord]:
    """The messages already stored under the writes' event keys: one lookup per platform
    (one in practice) on the inbox's unique key."""
    by_platform: dict[str, list[str]] = {}
    for write in writes:
        by_platform.setdefault(write.inbound.platform, []).append(write.inbound.event_id)
    stored: dict[EventKey, MessageRecord] = {}
    for platform, event_ids in by_platform.items():
        sql = _select_stored_sql(len(event_ids))
        for row in conn.execute(sql, (platform, *event_ids)):
            stored[(platform, row["event_id"])] = to_message(row)
    return stored


def _upsert_conversations(
    conn: sqlite3.Connection, writes: Sequence[AcceptWrite], now: float
) -> dict[str, tuple[int, int]]:
    """Each thread key's conversation made (its home from its first accept) or touched (its
    reply target from its last, as accepts made one by one leave it); ``(id, epoch)`` by key."""
    rows: dict[str, tuple[str, str, str, float, float, str]] = {}
    for write in writes:
        inbound = write.inbound
        first = rows.get(inbound.thread_key)
        home = write.home if first is None else first[2]
        rows[inbound.thread_key] = (
            inbound.thread_key,
            inbound.platform,
            home,
            now,
            now,
            write.target,
        )
    sql = _upsert_conversations_sql(len(rows))
    params = [value for row in rows.values() for value in row]
    return {key: (cid, epoch) for key, cid, epoch in conn.execute(sql, params)}


def _insert_messages(
    conn: sqlite3.Connection, writes: Sequence[AcceptWrite]
) -> dict[EventKey, MessageRecord]:
    """The writes' messages inserted (their event keys distinct and not stored yet), with
    their conversations, in one statement; their records by event key, built from what was
    written rather than read back."""
    if not writes:
        return {}
    now = time.time()
    conversations = _upsert_conversations(conn, writes, now)
    params: list[object] = []
    pending: dict[EventKey, tuple[AcceptWrite, int, str, str, int | None]] = {}
    for write in writes:
        inbound = write.inbound
        conversation_id, epoch = conversations[inbound.thread_key]
        new_epoch = None
        if write.starts_epoch:  # /new (made alone): what comes after it is of the fresh one
            new_epoch = epoch = conn.execute(
                "UPDATE conversations SET epoch = epoch + 1 WHERE id = ? RETURNING epoch",
                (conversation_id,),
            ).fetchone()[0]
        attachments = dumps([a.as_dict() for a in inbound.attachments])
        target = write.target
        params += (
            conversation_id,
            inbound.platform,
            inbound.event_id,
            inbound.thread_key,
            inbound.sender_id,
            inbound.sender_name,
            inbound.text,
            attachments,
            int(inbound.shared_chat),
            int(inbound.is_operator),
            int(write.is_command),
            target,
            InboxState.ACCEPTED.value,
            inbound.received_at,
            epoch,
            new_epoch,
            inbound.part_of,
        )
        pending[write.key] = (write, conversation_id, attachments, target, new_epoch)
    made: dict[EventKey, MessageRecord] = {}
    for message_id, platform, event_id in conn.execute(_insert_messages_sql(len(writes)), params):
        write, conversation_id, attachments, target, new_epoch = pending[(platform, event_id)]
        made[write.key] = _new_record(message_id, conversation_id, write, attachments, target)
    return made


def _new_record(
    message_id: int, conversation_id: int, write: AcceptWrite, attachments: str, target: str
) -> MessageRecord:
    """The record of a message just inserted, as :func:`~.rows.to_message` would read it
    back (the JSON columns parsed from the very text written) without reading it back."""
    inbound = write.inbound
    return MessageRecord(
        id=message_id,
        conversation_id=conversation_id,
        platform=inbound.platform,
        event_id=inbound.event_id,
        thread_key=inbound.thread_key,
        sender_id=inbound.sender_id,
        sender_name=inbound.sender_name,
        text=inbound.text,
        attachments=json.loads(attachments) if inbound.attachments else [],
        shared_chat=inbound.shared_chat,
        is_operator=inbound.is_operator,
        is_command=write.is_command,
        target=json.loads(target),
        state=InboxState.ACCEPTED,
        received_at=inbound.received_at,
        started_at=None,
        finished_at=None,
        error=None,
        part_of=inbound.part_of,
        starts_epoch=write.starts_epoch,
    )


class Intake(SqliteCore):
    """Inbound messages (see the module docstring)."""

    async def accept(
        self, inbound: Inbound, *, home: str, is_command: bool, starts_epoch: bool = False
    ) -> tuple[MessageRecord, bool]:
        return await self._tx(AcceptWrite(inbound, home, is_command, starts_epoch))

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
