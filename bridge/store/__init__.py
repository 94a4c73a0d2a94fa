"""The gateway's durable state: one interface (:class:`Store`), SQLite embedded by default.

Callers import from here; which backend they get is the CLI's and the config's business.
The contract every backend keeps is :mod:`.base`; the records it deals in :mod:`.records`.
"""

from __future__ import annotations

from .base import (
    Store,
    StoreError,
    StoreFull,
    StoreSchemaTooNew,
    StoreUnavailable,
    utc_midnight,
)
from .records import (
    ConversationRecord,
    MessageRecord,
    NewReply,
    PromptRecord,
    ReplyRecord,
    RunOutcome,
    RunRecord,
    TranscriptEntry,
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
