"""The local web chat's API against what another web page could make a browser do, and
against input a client library would never send (raw bytes over a socket)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bridge"))
from gateway_harness import Client, gateway_env, running_gateway

OPS_TOKEN = "ops-token-for-the-web-api-tests"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range, JAZZ_BRIDGE_OPS__TOKEN=OPS_TOKEN)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def raw(client: Client, request: bytes) -> tuple[int, bytes]:
    """Send ``request`` as it is; the status code and body of the answer."""
    host, port = client.base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(65536), 30)
        head, _, body = answer.partition(b"\r\n\r\n")
        return int(head.split()[1]), body
    finally:
        writer.close()


def post(path: str, body: bytes, *headers: bytes, host: bytes = b"127.0.0.1") -> bytes:
    lines = [b"POST " + path.encode() + b" HTTP/1.1", b"Host: " + host, b"Connection: close"]
    lines += [*headers, b"Content-Length: " + str(len(body)).encode()]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def test_another_site_cannot_post_or_read_through_a_browser(env: dict[str, str]) -> None:
    body = json.dumps({"user": "me", "text": "from another site"}).encode()
    path = "/api/threads/demo/messages"
    async with running_gateway(env) as (_, client):
        # a form or a no-cors fetch from another page: not JSON, so no preflight was needed
        plain = post(path, body, b"Content-Type: text/plain;charset=UTF-8")
        assert (await raw(client, plain))[0] == 415
        form = post(path, b"user=me&text=x", b"Content-Type: application/x-www-form-urlencoded")
        assert (await raw(client, form))[0] == 415
        # JSON that names another origin
        foreign = post(
            path, body, b"Content-Type: application/json", b"Origin: http://evil.example"
        )
        assert (await raw(client, foreign))[0] == 403
        # DNS rebinding: the attacker's name resolving to 127.0.0.1
        rebound = b"GET /api/threads/demo/messages HTTP/1.1\r\nHost: attacker.example\r\n"
        assert (await raw(client, rebound + b"Connection: close\r\n\r\n"))[0] == 421
        # a message is stored before its answer: none of those was (nor run)
        assert await client.messages("demo") == []
        assert client.runs() == []
        # the page itself: same origin, JSON
        own = post(path, body, b"Content-Type: application/json", b"Origin: http://127.0.0.1")
        assert (await raw(client, own))[0] == 202
        await client.wait_role("demo", "assistant")
        users = [m["text"] for m in await client.messages("demo") if m["role"] == "user"]
        assert users == ["from another site"]
        assert len(client.starts("web:demo")) == 1


async def test_bad_input_is_a_clear_400_never_a_500(env: dict[str, str]) -> None:
    path = "/api/threads/bad/messages"
    json_type = b"Content-Type: application/json"
    async with running_gateway(env) as (_, client):
        cases = [
            post(path, b'{"user":"a","text":"b"}', b"Content-Type: application/json; charset=nope"),
            post(path, b'{"user":"a","text":"x\\ud800"}', json_type),
            post(path, b'{"user":"\\ud800","text":"hi"}', json_type),
            post(path, b'{"user":"a","text":"hi"}', json_type, b"Idempotency-Key: \xff\xfe"),
            post("/api/threads/bad/choices", b'{"user":"a","token":"\\ud800"}', json_type),
        ]
        for request in cases:
            status, answer = await raw(client, request)
            assert status == 400, (request, status, answer)
        ops = [
            b"GET /ops HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \xff\r\n",
            b"GET /ops/c/99999999999999999999 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {OPS_TOKEN}\r\n".encode(),
        ]
        statuses = [(await raw(client, r + b"Connection: close\r\n\r\n"))[0] for r in ops]
        assert statuses == [403, 404]
        assert await client.messages("bad") == []  # stored before any answer: none was
        assert client.runs() == []


async def test_event_streams_opened_while_stopping_are_refused(env: dict[str, str]) -> None:
    async with running_gateway(env) as (app, client):
        (web,) = [a for a in app.adapters if a.name == "web"]
        await web.stop()  # the gateway's stop path, first step
        get = b"GET /api/threads/t/events HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        status, _ = await raw(client, get)
        assert status == 503  # a browser's EventSource does not reconnect after this
