"""Connections per peer: one address may hold at most ``server.max_connections_per_peer``.

The body gates and the buffer cap (:mod:`bridge.http.server`) bound what a request can make
the gateway hold, but every open connection costs a descriptor and a parser whatever it
sends; one client opening thousands that send nothing would take every descriptor the
gateway has (its runs', its store's). A connection beyond its peer's limit is answered
``429`` with ``Connection: close`` as soon as it is accepted, before a byte of it is read,
and closed; the others are served as before. Behind a reverse proxy every connection comes
from the proxy's address: raise the limit to what the proxy may open, or 0 for none.

aiohttp has no such limit, and its handler learns the peer only once connected: the
listening socket's protocol factory (:class:`PeerLimitedSite`) wraps each of aiohttp's
request handlers in :class:`_Counted`, which counts the connection and hands the
transport's events to the handler unchanged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiohttp import web

log = logging.getLogger(__name__)

RETRY_AFTER_S = 1
REFUSAL_BODY = b"too many connections from this address (server.max_connections_per_peer)\n"
REFUSAL = (
    b"HTTP/1.1 429 Too Many Requests\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Retry-After: %d\r\n"
    b"Connection: close\r\n"
    b"Content-Length: %d\r\n"
    b"\r\n" % (RETRY_AFTER_S, len(REFUSAL_BODY))
) + REFUSAL_BODY


class PeerConnections:
    """How many connections each peer address has open; ``limit`` 0 means no limit."""

    def __init__(self, limit: int, on_refused: Callable[[str], None] | None = None) -> None:
        self.limit = limit
        self.open: dict[str, int] = {}
        self._on_refused = on_refused
        self._over: set[str] = set()  # peers refused since they were last under the limit

    def take(self, peer: str) -> bool:
        """Count a new connection of ``peer``; False (counted as refused) when it has its
        limit's worth open already."""
        held = self.open.get(peer, 0)
        if self.limit and held >= self.limit:
            if peer not in self._over:
                self._over.add(peer)
                log.warning(
                    "%s has %d connections open, server.max_connections_per_peer: further "
                    "ones are refused (429) until it closes some",
                    peer,
                    held,
                )
            if self._on_refused is not None:
                self._on_refused(peer)
            return False
        self.open[peer] = held + 1
        return True

    def give_back(self, peer: str) -> None:
        left = self.open.get(peer, 0) - 1
        if left > 0:
            self.open[peer] = left
        else:
            self.open.pop(peer, None)
            self._over.discard(peer)


def _peer(transport: asyncio.BaseTransport) -> str:
    name = transport.get_extra_info("peername")
    if isinstance(name, tuple) and name:
        return str(name[0])  # the address; its port differs per connection
    return str(name or "")  # a Unix socket's: one peer for all


class _Counted(asyncio.Protocol):
    """One accepted connection: counted against its peer, then aiohttp's handler's."""

    def __init__(self, handler: asyncio.Protocol, peers: PeerConnections) -> None:
        self._handler = handler
        self._peers = peers
        self._peer: str | None = None  # set once counted: the handler has the connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = _peer(transport)
        if not self._peers.take(peer):
            assert isinstance(transport, asyncio.WriteTransport)
            transport.write(REFUSAL)
            transport.close()  # once the refusal is written; nothing is read
            return
        self._peer = peer
        self._handler.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._peer is None:
            return
        self._peers.give_back(self._peer)
        self._handler.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._peer is not None:
            self._handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self._handler.eof_received() if self._peer is not None else None

    def pause_writing(self) -> None:
        if self._peer is not None:
            self._handler.pause_writing()

    def resume_writing(self) -> None:
        if self._peer is not None:
            self._handler.resume_writing()


class PeerLimitedSite(web.BaseSite):
    """aiohttp's TCP site, each connection counted against its peer (see the module)."""

    __slots__ = ("_bound_port", "_host", "_peers", "_port")

    def __init__(
        self, runner: web.BaseRunner, host: str, port: int, peers: PeerConnections
    ) -> None:
        super().__init__(runner)
        self._host = host
        self._port = port
        self._peers = peers
        self._bound_port: int | None = None

    @property
    def port(self) -> int:
        """The port listened on (the one the system picked for port 0, once started)."""
        return self._bound_port if self._bound_port is not None else self._port

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self.port}"

    async def start(self) -> None:
        await super().start()
        handlers = self._runner.server
        assert handlers is not None  # the runner is set up (BaseSite checks)
        peers = self._peers
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Counted(handlers(), peers),
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=True,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port
