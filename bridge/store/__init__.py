"""The gateway's durable state: one interface (:class:`Store`), SQLite embedded by default.

Callers import from here; which backend they get is the CLI's and the config's business.
"""

from __future__ import annotations

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
    utc_midnight,
)
from .retry import StoreRetry
from .sqlite import SCHEMA_VERSION, SqliteStore

__all__ = [
    "SCHEMA_VERSION",
    "ConversationRecord",
    "MessageRecord",
    "NewReply",
    "PromptRecord",
    "ReplyRecord",
    "RunOutcome",
    "RunRecord",
    "SqliteStore",
    "Store",
    "StoreError",
    "StoreFull",
    "StoreRetry",
    "StoreSchemaTooNew",
    "StoreUnavailable",
    "TranscriptEntry",
    "utc_midnight",
]
