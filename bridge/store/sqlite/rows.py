"""Between SQLite rows and the store's records, and the writes several of its parts share.

Records are what :mod:`bridge.store.base` defines; JSON columns are written with
:func:`dumps` (compact, keys sorted) and read back with ``json.loads``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from ...model import InboxState, Outgoing, ReplyState, ReplyTarget
from ..records import (
    ConversationRecord,
    MessageRecord,
    NewReply,
    PromptRecord,
    ReplyRecord,
    RunOutcome,
    RunRecord,
)

# one encoder for every call: json.dumps with these options builds a new JSONEncoder each
# time, which cost as much as the encoding of a reply target (two per accepted message)
_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True)


def dumps(value: Any) -> str:
    return _ENCODER.encode(value)


def to_message(row: sqlite3.Row) -> MessageRecord:
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


def to_conversation(row: sqlite3.Row) -> ConversationRecord:
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


def to_run(row: sqlite3.Row) -> RunRecord:
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
            # absent from a store of schema 4 or older read as it is (homes list/show open
            # it read-only: the gateway migrates it at its next start)
            stopped_by=row["stopped_by"] if "stopped_by" in row.keys() else None,  # noqa: SIM118
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


def to_reply(row: sqlite3.Row) -> ReplyRecord:
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


def to_prompt(row: sqlite3.Row) -> PromptRecord:
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


def insert_replies(
    conn: sqlite3.Connection, replies: list[NewReply], now: float
) -> list[ReplyRecord]:
    """Record ``replies`` (an existing dedupe key returns the existing record), in order."""
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
                dumps(reply.outgoing.as_dict()),
                dumps(
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
        records.append(to_reply(row))
    return records


def merge_parts(conn: sqlite3.Connection, parts: Sequence[int], now: float) -> None:
    """Close the other parts of a message as ``merged`` (those still ``accepted``)."""
    conn.executemany(
        "UPDATE inbox SET state = ?, started_at = ?, finished_at = ? WHERE id = ? AND state = ?",
        [(InboxState.MERGED.value, now, now, part, InboxState.ACCEPTED.value) for part in parts],
    )
