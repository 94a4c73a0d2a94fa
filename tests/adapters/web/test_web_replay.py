"""The web chat's event streams resumed (adapters/web/replay.py, adapters/web/adapter.py): a
stream that reconnects (an EventSource does, by itself, after a network blip) gets what was
sent meanwhile, once, or is told it missed something (a ``gap``: events no longer kept, an
id of an older process), never a short replay; and a stream whose client stopped reading
is ended after its backlog (``MAX_STREAM_BACKLOG``), not left silently short, the client
resuming from the last event it got (``Last-Event-ID``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from accounts_support import remove_accounts
from web_support import Client, gateway_env, running_gateway

from adapters.web.adapter import WebAdapter
from adapters.web.surface import MAX_STREAM_BACKLOG

READ_TIMEOUT_S = 20
EXTRA = 3  # events published past the backlog


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def _read_event(stream: aiohttp.ClientResponse) -> dict[str, Any]:
    """The next event of the stream (comments skipped): its id, type and data."""
    event: dict[str, Any] = {}
    async for raw in stream.content:
        line = raw.decode().rstrip("\n")
        if not line:
            if event:
                return event
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(": ")
        event[field] = json.loads(value) if field == "data" else value
    raise AssertionError("the stream ended")


async def _until_answer(stream: aiohttp.ClientResponse, text: str) -> list[dict[str, Any]]:
    """Events up to the assistant message that contains ``text``."""
    seen: list[dict[str, Any]] = []

    async def read() -> None:
        while True:
            event = await _read_event(stream)
            seen.append(event)
            data = event.get("data", {})
            if data.get("role") == "assistant" and text in data.get("text", ""):
                return

    await asyncio.wait_for(read(), READ_TIMEOUT_S)
    return seen


def _events_url(client: Client, thread: str) -> str:
    return f"{client.base}/api/threads/{thread}/events"


async def test_a_reconnected_stream_gets_what_it_missed_once(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        async with client.session.get(_events_url(client, "re")) as stream:
            await client.post("re", "first")
            seen = await _until_answer(stream, "first")
        last = seen[-1].get("id")
        assert last, f"the stream's events carry no id to resume from: {seen[-1]}"
        # the connection drops; the second answer comes meanwhile
        await client.post("re", "second")
        await client.wait_role("re", "assistant", 2)
        headers = {"Last-Event-ID": last}
        async with client.session.get(_events_url(client, "re"), headers=headers) as stream:
            again = await _until_answer(stream, "second")
        texts = [e["data"].get("text", "") for e in again if e.get("type") == "message"]
        assert not any("first" in t for t in texts), f"sent twice: {texts}"


async def test_a_stream_that_cannot_be_resumed_says_so(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        headers = {"Last-Event-ID": "an-older-process-7"}
        async with client.session.get(_events_url(client, "gap"), headers=headers) as stream:
            event = await asyncio.wait_for(_read_event(stream), READ_TIMEOUT_S)
        assert event.get("event") == "gap", event


def test_events_no_longer_kept_are_a_gap_never_a_short_replay() -> None:
    from adapters.web.replay import REPLAY_EVENTS, REPLAY_THREADS, EventLog

    log = EventLog()
    first = log.add("t", {"type": "message", "ref": "a"})["id"]
    for i in range(REPLAY_EVENTS):
        log.add("t", {"type": "message", "ref": f"m{i}"})
    replay = log.since("t", first)  # all it missed is still kept
    assert replay is not None and len(replay) == REPLAY_EVENTS
    log.add("t", {"type": "message", "ref": "one more"})
    assert log.since("t", first) is None  # the one after it was dropped to bound memory
    newest = log.current_id()
    # a bubble's edits: only the newest is replayed
    for n in range(3):
        log.add("t", {"type": "edit", "ref": "bubble", "text": f"working {n}"})
    replay = log.since("t", newest)
    assert replay is not None and [e["text"] for e in replay] == ["working 2"]
    # a thread forgotten (many others became active since): a gap, not nothing
    for i in range(REPLAY_THREADS):
        log.add(f"other-{i}", {"type": "message", "ref": "x"})
    assert log.since("t", log.current_id()) == []  # nothing after now
    assert log.since("t", newest) is None


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
