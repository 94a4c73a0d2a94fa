"""Review: an event stream that ended must leave nothing behind in the web surface.

Every GET /api/threads/<name>/events adds an entry for <name> to the surface's listener map
(a defaultdict) and only discards the queue from the set when the stream ends, so the key
stays forever: any thread name anyone ever streamed (the name is free text chosen by the
client, nothing is stored for it) costs the process memory until it restarts.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bridge"))
from gateway_harness import gateway_env, running_gateway, wait_until


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def _open_and_drop(port: int, thread: str) -> None:
    """Open the event stream of ``thread``, read its first line, hang up."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"GET /api/threads/{thread}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b": connected\n\n"), 10)
        assert b" 200 " in head.split(b"\r\n", 1)[0]
    finally:
        writer.close()


async def test_closed_event_streams_leave_no_entry_per_thread(env: dict[str, str]) -> None:
    async with running_gateway(env) as (app, client):
        (web,) = [a for a in app.adapters if a.name == "web"]
        listeners = web.surface.listeners  # type: ignore[attr-defined]
        threads = [f"probe-{secrets.token_hex(4)}-{i}" for i in range(20)]
        for thread in threads:
            await _open_and_drop(app.port, thread)
        # every stream has noticed its client is gone (at the latest at its heartbeat)
        await wait_until(
            lambda: all(not listeners.get(t) for t in threads),
            timeout=40,
            what="the dropped streams to end",
        )
        left = [t for t in threads if t in listeners]
        assert left == [], f"{len(left)} of {len(threads)} thread names stay in memory: {left[:3]}"
        # and nothing was stored for any of them: the names cost memory only
        for thread in threads[:2]:
            assert await client.messages(thread) == []
