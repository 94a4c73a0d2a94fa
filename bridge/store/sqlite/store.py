"""The embedded store: :class:`bridge.store.base.Store` on one SQLite file.

This is what ``jazz-bridge serve`` uses with no configuration: a single gateway process
owns the database. It exists so that an inbound message can be persisted durably before
the platform is acknowledged (WAL, ``synchronous=FULL``: a commit that returned survives a
power cut) and so that recovery after a crash finds every accepted message and every
undelivered reply.

The store is built of parts, one module each, all on :class:`~.core.SqliteCore` (one
connection on one worker thread, every write group-committed): the files and their
state-file rules (:mod:`.files`, :mod:`.schema`), intake, conversations, runs, retention,
replies, prompts and the adapters' small state. :class:`SqliteStore` joins them.
"""

from __future__ import annotations

from .conversations import Conversations
from .intake import Intake
from .kv import AdapterState
from .prompts import Prompts
from .replies import Replies
from .retention import Retention
from .runs import Runs


class SqliteStore(Intake, Conversations, Runs, Retention, Replies, Prompts, AdapterState):
    """The durable store on one SQLite file at ``path`` (see the module docstring).

    ``SqliteStore(path, *, file_mode=0o640, read_only=False)``: see
    :class:`~.core.SqliteCore`.
    """
