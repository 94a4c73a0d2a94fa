"""An event stream whose client stopped reading is ended, not left silently short.

A stream holds at most ``MAX_STREAM_BACKLOG`` events not yet written; the events after that
were dropped for it without a word (no ``gap``), so a client that caught up later never
learnt it missed an answer. Now the stream ends after its backlog, and the client resumes
from the last event it got (``Last-Event-ID``, as an EventSource does by itself).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from accounts_support import remove_accounts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bridge"))
from gateway_harness import gateway_env, running_gateway

from adapters.web.adapter import MAX_STREAM_BACKLOG, WebAdapter

READ_TIMEOUT_S = 20
EXTRA = 3  # events published past the backlog


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def read_all(stream: aiohttp.ClientResponse) -> list[dict[str, Any]]:
    """Every event until the stream ends (bounded)."""
    events: list[dict[str, Any]] = []

    async def read() -> None:
        event: dict[str, Any] = {}
        async for raw in stream.content:
            line = raw.decode().rstrip("\n")
            if not line:
                if "data" in event:
                    events.append(event)
                event = {}
            elif not line.startswith(":"):
                field, _, value = line.partition(": ")
                event[field] = json.loads(value) if field == "data" else value

    await asyncio.wait_for(read(), READ_TIMEOUT_S)
    return events


async def test_a_stream_too_far_behind_ends_and_resumes_with_what_it_missed(
    env: dict[str, str],
) -> None:
    async with running_gateway(env) as (app, client):
        (web,) = [a for a in app.adapters if isinstance(a, WebAdapter)]
        url = f"{client.base}/api/threads/lag/events"
        async with client.session.get(url) as stream:
            await asyncio.wait_for(stream.content.readline(), READ_TIMEOUT_S)  # connected
            # more events at once than the stream may hold before it writes any
            for i in range(MAX_STREAM_BACKLOG + EXTRA):
                web.surface._publish(
                    "lag", {"type": "message", "role": "assistant", "text": f"n{i}"}
                )
            got = await read_all(stream)  # the stream ends by itself after its backlog
        texts = [e["data"]["text"] for e in got]
        assert texts == [f"n{i}" for i in range(MAX_STREAM_BACKLOG)]
        headers = {"Last-Event-ID": got[-1]["id"]}
        async with client.session.get(url, headers=headers) as again:
            missed: list[str] = []
            while len(missed) < EXTRA:
                line = await asyncio.wait_for(again.content.readline(), READ_TIMEOUT_S)
                if line.startswith(b"data: "):
                    missed.append(json.loads(line[6:])["text"])
        total = MAX_STREAM_BACKLOG + EXTRA
        assert missed == [f"n{i}" for i in range(MAX_STREAM_BACKLOG, total)]
