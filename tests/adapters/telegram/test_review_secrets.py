"""Review: the bot token must never be shown by the gateway's own HTTP endpoints.

The Bot API URL carries the token (``…/bot<TOKEN>/getUpdates``). aiohttp names that URL in
the error of a connection that could not be made in time (``ConnectionTimeoutError('Connection
timeout to host http://…/bot<TOKEN>/getUpdates')``); the transport wraps it into PTB's
``TimedOut``, the adapter keeps the text as its health error and ``GET /healthz`` (the one
endpoint a load balancer or a container runtime is meant to reach) serves it unmasked.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

import aiohttp
import pytest
from tg_support import TOKEN, FakeBotApi, running_gateway, wait_until

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


class Forwarder:
    """A TCP forwarder to the fake Bot API that can be *frozen*: its open connections are cut
    and it stops accepting, with its accept queue full, so a new connection hangs in the
    handshake (as behind a firewall that drops packets, or a Bot API host that is down)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)
        self.sock.setblocking(False)
        self.port = int(self.sock.getsockname()[1])
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._fillers: list[socket.socket] = []
        self._acceptor: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._acceptor = asyncio.create_task(self._accept())

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(self.sock)
            task = asyncio.create_task(self._serve(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, conn: socket.socket) -> None:
        c_reader, c_writer = await asyncio.open_connection(sock=conn)
        u_reader, u_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers += [c_writer, u_writer]

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            with contextlib.suppress(Exception):
                w.close()

        await asyncio.gather(pipe(c_reader, u_writer), pipe(u_reader, c_writer))

    async def freeze(self) -> None:
        assert self._acceptor is not None
        self._acceptor.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._acceptor
        for w in self._writers:
            with contextlib.suppress(Exception):
                w.transport.abort()
        for _ in range(3):  # fill the accept queue: later handshakes are not answered
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", self.port))
            self._fillers.append(filler)

    async def close(self) -> None:
        if self._acceptor is not None and not self._acceptor.done():
            self._acceptor.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for w in self._writers:
            with contextlib.suppress(Exception):
                w.transport.abort()
        for s in [*self._fillers, self.sock]:
            s.close()


async def test_healthz_never_shows_the_bot_token(env: dict[str, str], fake: FakeBotApi) -> None:
    """The Bot API host stops answering handshakes while the gateway polls: /healthz says
    Telegram is down (503), and must say so without the bot token in its body."""
    del env["JAZZ_BRIDGE_TELEGRAM__WEBHOOK_URL"]
    env["JAZZ_BRIDGE_TELEGRAM__POLL_TIMEOUT_S"] = "1"
    forwarder = Forwarder(fake.port)
    forwarder.start()
    env["JAZZ_BRIDGE_TELEGRAM__API_URL"] = f"http://127.0.0.1:{forwarder.port}/bot"
    try:
        async with running_gateway(env) as (app, _client):
            await wait_until(lambda: bool(fake.called("getUpdates")), 10, "polling started")
            await forwarder.freeze()
            (telegram,) = [a for a in app.adapters if a.name == "telegram"]
            await wait_until(
                lambda: "in time" in (telegram.health() or ""), 30, "a connect timeout noted"
            )
            async with (
                aiohttp.ClientSession() as s,
                s.get(f"http://127.0.0.1:{app.port}/healthz") as r,
            ):
                status, body = r.status, await r.text()
            assert status == 503
            assert TOKEN not in body, f"/healthz shows the bot token: {body}"
    finally:
        await forwarder.close()
