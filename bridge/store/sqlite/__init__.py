"""The embedded SQLite store (:class:`SqliteStore`), split by job into the modules beside
this one; what callers use of it is exported here."""

from __future__ import annotations

from .schema import SCHEMA_VERSION
from .store import SqliteStore

__all__ = ["SCHEMA_VERSION", "SqliteStore"]
