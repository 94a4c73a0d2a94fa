"""A redacted message (a typed secret) leaves no copy in the store's files.

The row was overwritten with "[redacted]", but the old text stayed in the write-ahead log
(``bridge.db-wal``, readable by the operator group) for as long as the gateway ran, and in
the freed page of the database file after a checkpoint: a person told "removed from the
gateway's records" had it in any copy an operator made.
"""

from __future__ import annotations

from pathlib import Path

from bridge.model import Inbound
from bridge.store import SqliteStore

SECRET = "correct-horse-battery-staple-4242"


async def test_a_redacted_secret_is_in_no_file_of_the_store(tmp_path: Path) -> None:
    db = tmp_path / "bridge.db"
    store = SqliteStore(db)
    await store.open()
    try:
        inbound = Inbound(
            platform="web", event_id="e1", thread_key="web:t", sender_id="u", text=SECRET
        )
        msg, _ = await store.accept(inbound, home="web-t", is_command=False)
        await store.redact_message(msg.id)
        files = sorted(p for p in tmp_path.iterdir() if p.name.startswith("bridge.db"))
        holding = [p.name for p in files if SECRET.encode() in p.read_bytes()]
        assert holding == [], f"the secret is still in {holding} (of {[p.name for p in files]})"
        stored = await store.get_message(msg.id)
        assert stored is not None and stored.text == "[redacted]"
    finally:
        await store.close()
