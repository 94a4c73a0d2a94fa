"""The gateway's one aiohttp application: health, readiness, metrics, and adapters' routes.

One middleware every route shares: a body over the size limit is counted per platform
(aiohttp refuses it with 413), and a write the store refused (a full disk, an unusable
database) answers 507/503 with a plain reason instead of a 500 and a traceback: nothing was
acknowledged, so the platform delivers it again.

It also keeps anyone who is not a platform from making the gateway hold their bytes: a
body is read only after what its headers can prove (an adapter's gate: Telegram's secret
header, Slack's signature headers and their timestamp, the web chat's bearer token) holds;
all the bodies being read at once may hold at most ``server.max_buffered_bytes`` (a request
beyond that is answered 503 at once, with Retry-After), and one peer may have at most
``server.max_requests_per_peer`` requests under way (429). Before, 1,200 slow connections
that sent no credential took the gateway from 0.4 to 1.55 GB.
Connections themselves are counted per peer before a byte is read (:mod:`bridge.http.connections`).

A route that takes files (the web chat's message with uploads, ``multipart/form-data``) is
marked :func:`streamed`: its gate still holds its body back, but the body is not read
here into memory (it may be larger than ``server.max_body_bytes``): its handler streams it
within its own size limit and :data:`STREAM_IDLE_S` per read, holding one chunk at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage

from ..logs import mask
from ..metrics import Metrics
from ..store import StoreError, StoreFull

log = logging.getLogger(__name__)

HealthCheck = Callable[[], dict[str, str | None]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# what a route's headers must prove before its body is read: a refusal, or None
BodyGate = Callable[[web.Request], web.StreamResponse | None]
BODY_GATES = web.AppKey("body_gates", list[tuple[str, BodyGate]])
HELD = web.RequestKey("held", tuple[str, int])  # the room a request's body holds
BUSY_RETRY_S = 1  # Retry-After of a request refused while the buffers are full
ROUTE_PLATFORMS = web.AppKey("route_platforms", tuple[tuple[str, str], ...])
# How long a connection may stay open with no request under way: one that sends nothing, or
# never ends its headers (slow-loris), is closed then, as is an idle keep-alive one (longer
# than a proxy's usual 60 s, so the proxy hangs up first). aiohttp's own default (3630 s)
# let each such client hold one of the gateway's file descriptors for an hour.
HTTP_IDLE_TIMEOUT_S = 75.0
# How long a request's body (at most server.max_body_bytes) may take to arrive: a body that
# never ends is answered 408 instead of holding its connection for ever.
HTTP_BODY_TIMEOUT_S = 30.0
# A streamed body (see the module): how long one read may wait for its next bytes, and the
# room it holds in the buffers' account (the chunk its handler reads at a time)
STREAM_IDLE_S = HTTP_BODY_TIMEOUT_S
STREAM_CHUNK_BYTES = 256 * 1024
STREAMED_ROUTES = web.AppKey("streamed_routes", set[web.AbstractRoute])
STREAMED_TYPES = frozenset({"multipart/form-data"})  # the bodies a streamed route streams


def _platform(request: web.Request) -> str:
    """The metrics' platform label of a request: the adapter whose ``route_prefix`` its path
    is under (:class:`~bridge.ports.AdapterSpec`), ``http`` for the gateway's own routes."""
    path = request.path
    return next(
        (name for prefix, name in request.app[ROUTE_PLATFORMS] if path.startswith(prefix)), "http"
    )


def streamed(app: web.Application, route: web.AbstractRoute) -> None:
    """Let ``route``'s handler stream a ``multipart/form-data`` body itself (see the module);
    any other body of it is read here as every body is."""
    app[STREAMED_ROUTES].add(route)


def streams_body(request: web.Request) -> bool:
    """Whether ``request``'s body is left to its handler to stream (:func:`streamed`)."""
    return (
        request.content_type in STREAMED_TYPES
        and request.match_info.route in request.app[STREAMED_ROUTES]
    )


def gate_bodies(app: web.Application, prefix: str, gate: BodyGate) -> None:
    """Read the body of a request under ``prefix`` only when ``gate`` (its headers) lets it."""
    app[BODY_GATES].append((prefix, gate))


class Admission:
    """The bodies being read at once, in bytes and per peer (see the module)."""

    def __init__(self, max_bytes: int, per_peer: int) -> None:
        self.max_bytes = max_bytes
        self.per_peer = per_peer
        self.bytes = 0
        self.peers: dict[str, int] = {}

    def take(self, peer: str, size: int) -> str | None:
        """Room for a body of ``size`` bytes from ``peer``, or why there is none."""
        if self.peers.get(peer, 0) >= self.per_peer:
            return "peer"
        if self.bytes + size > self.max_bytes:
            return "busy"
        self.bytes += size
        self.peers[peer] = self.peers.get(peer, 0) + 1
        return None

    def give_back(self, peer: str, size: int) -> None:
        self.bytes -= size
        left = self.peers[peer] - 1
        if left:
            self.peers[peer] = left
        else:
            del self.peers[peer]


def build_app(
    *,
    metrics: Metrics,
    health: HealthCheck,
    ready: Callable[[], bool],
    max_body_bytes: int,
    max_buffered_bytes: int | None = None,
    max_requests_per_peer: int = 256,
    before_scrape: Callable[[], Awaitable[None]] | None = None,
    route_platforms: Iterable[tuple[str, str]] = (),
) -> web.Application:
    """The application, its limits, and the gateway's own routes; ``route_platforms``: the
    adapters' (route prefix, platform name) pairs, by which refusals are counted."""
    # a body of the largest size allowed always fits, alone
    admission = Admission(max(max_buffered_bytes or 0, max_body_bytes), max_requests_per_peer)

    async def read_body(request: web.Request) -> web.StreamResponse | None:
        """Read the body within ``HTTP_BODY_TIMEOUT_S`` (handlers get it from memory), once
        its gate let it and there is room for it; a refusal, or None (the room is held
        until the request is answered: call ``admission.give_back`` then).

        A body already whole (a platform's event is one packet with its headers) is read
        without the timeout: arming and cancelling it was ~5% of the intake's CPU."""
        path = request.path
        for prefix, gate in request.app[BODY_GATES]:
            if path.startswith(prefix):
                refusal = gate(request)
                if refusal is not None:
                    refusal.force_close()  # its body is never read
                    return refusal
        streaming = streams_body(request)
        size = request.content_length
        size = max_body_bytes if size is None or size > max_body_bytes else size
        if streaming:  # its handler holds one chunk at a time
            size = min(size, STREAM_CHUNK_BYTES)
        peer = request.remote or "?"
        why = admission.take(peer, size)
        if why is not None:
            metrics.auth_failures.labels(_platform(request), why).inc()
            log.warning("%s %s from %s: refused, %s", request.method, path, peer, why)
            if why == "peer":
                text = f"too many requests under way from {peer}; try again later"
                refused = web.Response(status=429, text=text)
            else:
                text = "the gateway is reading too many requests at once; try again"
                refused = web.Response(status=503, text=text)
            refused.headers["Retry-After"] = str(BUSY_RETRY_S)
            refused.force_close()
            return refused
        request[HELD] = (peer, size)
        if streaming:
            return None
        try:
            if request.content.is_eof():  # all of it came with the headers: no wait
                await request.read()
            else:
                async with asyncio.timeout(HTTP_BODY_TIMEOUT_S):  # no task per request
                    await request.read()
        except TimeoutError:
            log.warning("%s %s: body not received in time", request.method, path)
            text = f"the request body did not arrive within {HTTP_BODY_TIMEOUT_S:.0f}s"
            slow = web.Response(status=408, text=text)
            slow.force_close()
            return slow
        except (BadHttpMessage, web.RequestPayloadError):
            pass  # a body that cannot be read (bad gzip): its handler reads and says so
        return None

    @web.middleware
    async def refusals(request: web.Request, handler: Handler) -> web.StreamResponse:
        """A body over ``max_body_bytes`` (413 from aiohttp) counted per platform; a write
        the store refused said as such (the sender, a platform or a person, sends again).
        One middleware for both: each layer costs every request a coroutine and a frame.
        A body is read here, within ``HTTP_BODY_TIMEOUT_S`` (handlers get it from memory)."""
        try:
            if request.can_read_body:
                refusal = await read_body(request)
                if refusal is not None:
                    return refusal
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            metrics.auth_failures.labels(_platform(request), "too_big").inc()
            raise
        except StoreFull as exc:
            log.error("%s %s: refused, not stored: %s", request.method, request.path, exc)
            text = "the gateway's disk is full: this was NOT stored; send it again later"
            return web.Response(status=507, text=text)
        except StoreError as exc:
            log.error("%s %s: refused, not stored: %s", request.method, request.path, exc)
            text = "the gateway cannot store this right now: it was NOT stored; send it again"
            return web.Response(status=503, text=text)
        finally:
            held = request.get(HELD)
            if held is not None:
                admission.give_back(*held)

    app = web.Application(client_max_size=max_body_bytes, middlewares=[refusals])
    app[BODY_GATES] = []
    app[STREAMED_ROUTES] = set()
    app[ROUTE_PLATFORMS] = tuple(route_platforms)

    async def healthz(_: web.Request) -> web.Response:
        transports = health()
        down = {name: why for name, why in transports.items() if why}
        body = {
            "ok": not down,
            # masked as log lines are: a transport's reason may quote a URL with a token
            "transports": {name: mask(why) if why else "ok" for name, why in transports.items()},
        }
        if down:
            body["down"] = sorted(down)
        return web.json_response(body, status=503 if down else 200)

    async def readyz(_: web.Request) -> web.Response:
        ok = ready()
        return web.json_response({"ready": ok}, status=200 if ok else 503)

    async def metrics_route(_: web.Request) -> web.Response:
        if before_scrape is not None:  # gauges read from elsewhere (the uid map)
            await before_scrape()
        return web.Response(body=metrics.render(), headers={"Content-Type": metrics.content_type})

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_route)
    return app


def make_runner(app: web.Application, *, shutdown_timeout: float) -> web.AppRunner:
    """The runner that serves ``app``, with the connection limits above."""
    return web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        shutdown_timeout=shutdown_timeout,
        keepalive_timeout=HTTP_IDLE_TIMEOUT_S,
    )
