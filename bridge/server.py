"""The gateway's one aiohttp application: health, readiness, metrics, and adapters' routes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from .metrics import Metrics

HealthCheck = Callable[[], dict[str, str | None]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PLATFORM_PATHS = (("/slack/", "slack"), ("/telegram/", "telegram"), ("/api/", "web"))


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
    async def count_too_big(request: web.Request, handler: Handler) -> web.StreamResponse:
        """A body over ``max_body_bytes`` is refused (413) by aiohttp; count it per platform."""
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            metrics.auth_failures.labels(_platform(request.path), "too_big").inc()
            raise

    app = web.Application(client_max_size=max_body_bytes, middlewares=[count_too_big])

    async def healthz(_: web.Request) -> web.Response:
        transports = health()
        down = {name: why for name, why in transports.items() if why}
        body = {
            "ok": not down,
            "transports": {name: (why or "ok") for name, why in transports.items()},
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
