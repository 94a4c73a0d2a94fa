"""The gateway's one aiohttp application: health, readiness, metrics, and adapters' routes.

Two middlewares every route shares: a body over the size limit is counted per platform
(aiohttp refuses it with 413), and a write the store refused (a full disk, an unusable
database) answers 507/503 with a plain reason instead of a 500 and a traceback: nothing was
acknowledged, so the platform delivers it again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage

from .logs import mask
from .metrics import Metrics
from .store import StoreError, StoreFull

log = logging.getLogger(__name__)

HealthCheck = Callable[[], dict[str, str | None]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PLATFORM_PATHS = (("/slack/", "slack"), ("/telegram/", "telegram"), ("/api/", "web"))
# How long a connection may stay open with no request under way: one that sends nothing, or
# never ends its headers (slow-loris), is closed then, as is an idle keep-alive one (longer
# than a proxy's usual 60 s, so the proxy hangs up first). aiohttp's own default (3630 s)
# let each such client hold one of the gateway's file descriptors for an hour.
HTTP_IDLE_TIMEOUT_S = 75.0
# How long a request's body (at most server.max_body_bytes) may take to arrive: a body that
# never ends is answered 408 instead of holding its connection for ever.
HTTP_BODY_TIMEOUT_S = 30.0


def _platform(path: str) -> str:
    """The metrics' platform label of a route (``http`` for the gateway's own)."""
    return next((name for prefix, name in PLATFORM_PATHS if path.startswith(prefix)), "http")


def build_app(
    *,
    metrics: Metrics,
    health: HealthCheck,
    ready: Callable[[], bool],
    max_body_bytes: int,
) -> web.Application:

    @web.middleware
    async def refusals(request: web.Request, handler: Handler) -> web.StreamResponse:
        """A body over ``max_body_bytes`` (413 from aiohttp) counted per platform; a write
        the store refused said as such (the sender, a platform or a person, sends again).
        One middleware for both: each layer costs every request a coroutine and a frame.
        A body is read here, within ``HTTP_BODY_TIMEOUT_S`` (handlers get it from memory)."""
        try:
            if request.can_read_body:
                try:
                    async with asyncio.timeout(HTTP_BODY_TIMEOUT_S):  # no task per request
                        await request.read()
                except TimeoutError:
                    log.warning("%s %s: body not received in time", request.method, request.path)
                    text = f"the request body did not arrive within {HTTP_BODY_TIMEOUT_S:.0f}s"
                    slow = web.Response(status=408, text=text)
                    slow.force_close()
                    return slow
                except (BadHttpMessage, web.RequestPayloadError):
                    pass  # a body that cannot be read (bad gzip): its handler reads and says so
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            metrics.auth_failures.labels(_platform(request.path), "too_big").inc()
            raise
        except StoreFull as exc:
            log.error("%s %s: refused, not stored: %s", request.method, request.path, exc)
            text = "the gateway's disk is full: this was NOT stored; send it again later"
            return web.Response(status=507, text=text)
        except StoreError as exc:
            log.error("%s %s: refused, not stored: %s", request.method, request.path, exc)
            text = "the gateway cannot store this right now: it was NOT stored; send it again"
            return web.Response(status=503, text=text)

    app = web.Application(client_max_size=max_body_bytes, middlewares=[refusals])

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
