"""The gateway's one aiohttp application: health, readiness, metrics, and adapters' routes."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from .metrics import Metrics

HealthCheck = Callable[[], dict[str, str | None]]


def build_app(
    *,
    metrics: Metrics,
    health: HealthCheck,
    ready: Callable[[], bool],
    max_body_bytes: int,
) -> web.Application:
    app = web.Application(client_max_size=max_body_bytes)

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
