"""The aiohttp transport under PTB: what reaches the server, and how transport failures map.

A real local aiohttp server stands in for the Bot API; the requests come from PTB's own
``Bot`` methods through ``AiohttpRequest``.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from telegram import Bot
from telegram.error import BadRequest, NetworkError, TimedOut
from telegram.request import BaseRequest

from adapters.telegram.transport import MEDIA_WRITE_S, AiohttpRequest, _content_size, env_proxy

TOKEN = "999999999:AAtransport-token"
ME = {"id": 999999999, "is_bot": True, "first_name": "Jazz", "username": "jazz_bot"}


class Server:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, Any]]] = []  # method, content type, fields
        self.mode = "ok"
        self.release = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        fields: dict[str, Any] = {}
        for name, value in (await request.post()).items():
            if isinstance(value, web.FileField):
                fields[name] = (value.filename, value.file.read())
            else:
                fields[name] = value
        self.seen.append((method, request.content_type, fields))
        if method == "getUpdates":  # a long poll: answered after 0.6 s, empty
            await asyncio.sleep(0.6)  # the server's own long-poll wait, not a synchronisation
            return web.json_response({"ok": True, "result": []})
        if self.mode == "hang":
            await asyncio.wait_for(self.release.wait(), timeout=30)
        if self.mode == "reset":
            assert request.transport is not None
            request.transport.abort()
            return web.Response()
        if self.mode == "bad":
            body = {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"}
            return web.json_response(body, status=400)
        if method == "getMe":
            return web.json_response({"ok": True, "result": ME})
        msg = {"message_id": 7, "date": 0, "chat": {"id": 42, "type": "private"}, "text": "x"}
        return web.json_response({"ok": True, "result": msg})


@pytest.fixture
async def served() -> AsyncIterator[tuple[Server, str]]:
    server = Server()
    app = web.Application()
    app.router.add_post("/bot{token}/{method}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield server, f"http://127.0.0.1:{port}/bot"
    server.release.set()
    await runner.cleanup()


async def make_bot(base: str, **timeouts: float) -> Bot:
    bot = Bot(
        TOKEN,
        base_url=base,
        request=AiohttpRequest(pool_size=4, **timeouts),
        get_updates_request=AiohttpRequest(pool_size=1),
    )
    await bot.initialize()
    return bot


async def test_fields_are_form_encoded_and_files_multipart(served: tuple[Server, str]) -> None:
    server, base = served
    bot = await make_bot(base)
    try:
        await bot.send_message(42, "hello & welcome", disable_notification=True)
        await bot.send_document(42, io.BytesIO(b"%PDF-bytes"), filename="a.pdf", caption="c")
    finally:
        await bot.shutdown()
    (_, ctype, fields) = server.seen[1]
    assert ctype == "application/x-www-form-urlencoded"
    assert fields["text"] == "hello & welcome" and fields["chat_id"] == "42"
    assert fields["disable_notification"] == "true"
    (_, ctype, fields) = server.seen[2]
    assert ctype == "multipart/form-data"
    assert fields["caption"] == "c"
    assert fields["document"] == ("a.pdf", b"%PDF-bytes")


async def test_a_hung_server_is_a_timeout(served: tuple[Server, str]) -> None:
    server, base = served
    bot = await make_bot(base, read_timeout=0.2)
    server.mode = "hang"
    try:
        with pytest.raises(TimedOut):
            await bot.send_message(42, "anyone there?")
    finally:
        server.release.set()
        await bot.shutdown()


async def test_a_long_poll_outlasts_the_default_read_timeout(served: tuple[Server, str]) -> None:
    # PTB adds getUpdates' own timeout to the read timeout; the transport must honour it
    _server, base = served
    bot = Bot(TOKEN, base_url=base, get_updates_request=AiohttpRequest(1, read_timeout=0.3))
    await bot.initialize()
    try:
        assert await bot.get_updates(timeout=1) == ()
        with pytest.raises(TimedOut):  # and without it, 0.3 s is the limit
            await bot.get_updates(timeout=0)
    finally:
        await bot.shutdown()


@pytest.mark.parametrize(
    ("mode", "error", "match"),
    [
        ("reset", NetworkError, r"^aiohttp\."),  # a transport failure, named by its class
        ("bad", BadRequest, r"(?i)chat not found"),  # the Bot API's own error, as PTB maps it
    ],
)
async def test_failures_map_onto_ptb_errors(
    served: tuple[Server, str], mode: str, error: type[Exception], match: str
) -> None:
    server, base = served
    bot = await make_bot(base)
    server.mode = mode
    try:
        with pytest.raises(error, match=match) as caught:
            await bot.send_message(42, "hello")
        assert not isinstance(caught.value, TimedOut)
    finally:
        await bot.shutdown()


async def test_not_initialized_is_a_clear_error() -> None:
    request = AiohttpRequest()
    with pytest.raises(RuntimeError, match="initialize"):
        await request.do_request("http://127.0.0.1:9/botX/getMe", "POST")
    with pytest.raises(ValueError, match="pool_size"):
        AiohttpRequest(pool_size=0)


def test_the_environment_names_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert env_proxy("https://api.telegram.org") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    assert env_proxy("https://api.telegram.org") == "http://proxy.internal:3128"
    assert env_proxy("http://127.0.0.1:8081") is None  # no http proxy named
    monkeypatch.setenv("NO_PROXY", "api.telegram.org")
    assert env_proxy("https://api.telegram.org") is None


def test_an_upload_gets_time_for_its_size(tmp_path: Path) -> None:
    request = AiohttpRequest(read_timeout=5, write_timeout=5, connect_timeout=5, pool_timeout=1)
    default = BaseRequest.DEFAULT_NONE
    small = request._timeout(default, default, default, default, upload_bytes=0)
    assert small.total is None and small.sock_read == 5  # a plain call: per-read bounds only
    big = request._timeout(default, default, default, default, upload_bytes=32 * 1024 * 100)
    assert big.total == 5 + MEDIA_WRITE_S + 5 + 1 + 100  # bounded, with 100 s for the body
    data = tmp_path / "report.pdf"
    data.write_bytes(b"x" * 5000)
    with data.open("rb") as fh:
        fh.read(1000)
        assert _content_size(fh) == 4000  # what is left to send
    assert _content_size(io.BytesIO(b"y" * 300)) == 300
    assert _content_size(b"z" * 7) == 7
