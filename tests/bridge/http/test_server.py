"""The gateway's HTTP server (``bridge/http/server.py``): its health, readiness and metrics
routes, and its limits on clients that hold a connection without finishing a request
(slow-loris).

Each such connection is a file descriptor of the gateway's; held for as long as the client
likes, a few thousand of them (from the internet when the gateway is bound beyond loopback,
or from any local account) use up its descriptors, and then it can no longer open its
database, start a run or take Slack's webhooks. The real gateway in process; the limits the
tests run with are short (the shipped ones are longer).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway, use_reference_runner

from bridge.http import server

IDLE_S = 1.0  # the limit the tests run with (the shipped one is longer)
BOUND_S = 20.0  # how long a test waits for the gateway to hang up


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_health_ready_and_metrics(env: dict[str, str], fake_dir: Path) -> None:
    use_reference_runner(env, fake_dir)
    async with running_gateway(env) as (app, client):
        await client.post("m", "hello", key="same")
        await client.post("m", "hello", key="same")
        await client.wait_role("m", "assistant")
        base = f"http://127.0.0.1:{app.port}"
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{base}/healthz") as r:
                assert r.status == 200 and (await r.json())["transports"] == {"web": "ok"}
            async with s.get(f"{base}/readyz") as r:
                assert r.status == 200
            async with s.get(f"{base}/metrics") as r:
                text = await r.text()
        assert 'jazz_bridge_messages_total{outcome="accepted",platform="web"} 1.0' in text
        assert 'jazz_bridge_messages_total{outcome="duplicate",platform="web"} 1.0' in text
        assert 'jazz_bridge_runs_total{outcome="ok"} 1.0' in text
        assert "jazz_bridge_run_duration_seconds_bucket" in text
        # the store's commits: at least the accept, the run's start and its outcome
        commits = next(
            float(line.split()[1])
            for line in text.splitlines()
            if line.startswith("jazz_bridge_store_commits_total ")
        )
        assert commits >= 3
        assert "jazz_bridge_store_writes_total " in text


# -- clients that never finish a request -----------------------------------------------------


@pytest.fixture
def short_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "HTTP_IDLE_TIMEOUT_S", IDLE_S, raising=False)
    monkeypatch.setattr(server, "HTTP_BODY_TIMEOUT_S", IDLE_S, raising=False)


async def _answer_or_hang_up(
    port: int, data: bytes
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    return reader, writer


async def _ends_within(reader: asyncio.StreamReader, what: str) -> bytes:
    try:
        return await asyncio.wait_for(reader.read(), BOUND_S)
    except TimeoutError:
        raise AssertionError(f"{what}: the connection is still held after {BOUND_S:.0f}s") from None


@pytest.mark.usefixtures("short_limits")
async def test_a_connection_that_never_finishes_its_headers_is_closed(env: dict[str, str]) -> None:
    async with running_gateway(env) as (app, _):
        silent = await _answer_or_hang_up(app.port, b"")
        half = await _answer_or_hang_up(app.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        try:
            await _ends_within(silent[0], "a connection that sent nothing")
            await _ends_within(half[0], "a request whose headers never end")
        finally:
            silent[1].close()
            half[1].close()


@pytest.mark.usefixtures("short_limits")
async def test_a_body_that_never_arrives_is_refused_not_waited_for(env: dict[str, str]) -> None:
    body = json.dumps({"user": "ada", "text": "hello"}).encode()
    head = (
        b"POST /api/threads/slow/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: " + str(len(body) + 100).encode()
    )
    async with running_gateway(env) as (app, client):
        reader, writer = await _answer_or_hang_up(app.port, head + b"\r\n\r\n" + body)
        try:
            answer = await _ends_within(reader, "a body 100 bytes short")
        finally:
            writer.close()
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        assert await client.messages("slow") == []  # nothing half-read was taken


@pytest.mark.usefixtures("short_limits")
async def test_an_event_stream_outlives_the_idle_limit(env: dict[str, str]) -> None:
    async with running_gateway(env) as (app, client):
        stream, stream_writer = await _answer_or_hang_up(
            app.port, b"GET /api/threads/live/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        )
        try:
            await asyncio.wait_for(stream.readuntil(b": connected\n\n"), BOUND_S)
            # a connection opened after the stream is cut for idling: the limit has passed
            silent = await _answer_or_hang_up(app.port, b"")
            await _ends_within(silent[0], "a connection that sent nothing")
            silent[1].close()
            # the stream, a request under way, is not idle: it still carries events
            await client.post("live", "still there?")
            got = await asyncio.wait_for(stream.readuntil(b"event: message\n"), BOUND_S)
            assert got
            # a quick POST is not hurried by the body limit
            await client.wait_role("live", "assistant")
        finally:
            stream_writer.close()
