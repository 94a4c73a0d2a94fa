"""The SQLite store's schema: the tables a fresh store is made with, the migrations that
bring an older one up to :data:`SCHEMA_VERSION`, and the check that refuses a newer one.

Kept apart from the code that reads and writes rows so that a schema change (a new column,
its migration, the version bump) is one module's diff.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..base import StoreError, StoreSchemaTooNew

SCHEMA_VERSION = 5
"""The schema this code writes (``PRAGMA user_version``); bump it with a migration."""

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
    # 5: who stopped a run and how ("Ada (Stop button)"), so the operators' views show a
    # person's Stop as that, not as a failure (NULL: not stopped, or finished before 5)
    "ALTER TABLE runs ADD COLUMN stopped_by TEXT",
)
assert len(_MIGRATIONS) == SCHEMA_VERSION - 1

# Made at every open when missing (no schema version: an older jazz-bridge just keeps them).
# Without them every "a run (a reply) of this message?" scanned the whole table: prune, on
# a store of a few months, held the write lock for minutes.
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS runs_by_message ON runs (message_id)",
    "CREATE INDEX IF NOT EXISTS replies_by_message ON replies (message_id)",
)

# Version 1, what a fresh store is made with before the migrations run (tests build old stores
# from it).
SCHEMA_V1 = """
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


def check_version(conn: sqlite3.Connection, path: Path) -> int:
    """The file's schema version; StoreSchemaTooNew when this code does not know it."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise StoreSchemaTooNew(
            f"store {path} has schema version {version}, newer than "
            f"{SCHEMA_VERSION} which this jazz-bridge understands; it was left "
            "untouched: upgrade jazz-bridge or point it at another database"
        )
    return version


def has_tables(conn: sqlite3.Connection) -> bool:
    row = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()
    return bool(row[0])


def ensure_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Create a fresh store's tables or migrate an older one, in one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Read again under the write lock: another process may have created it.
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StoreSchemaTooNew(
                f"store {path} has schema version {version}, newer than "
                f"{SCHEMA_VERSION} which this jazz-bridge understands"
            )
        if version == 0:
            if has_tables(conn):
                raise StoreError(
                    f"{path} is a SQLite database of something else (it has tables "
                    "but no jazz-bridge schema version); it was left untouched"
                )
            for statement in SCHEMA_V1.split(";"):
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
