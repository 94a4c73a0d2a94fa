"""A fake ``jazz daemon`` (aiohttp on 127.0.0.1, port 0): just enough of its HTTP API.

Shared by the backend's unit tests and the end-to-end test through the gateway.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

TOKEN = "tok-s3cret-bearer"
OPERATOR = "op-s3cret-operator"
WAIT = 5.0  # every wait on the fake is bounded by this
BODY = web.RequestKey("body", object)

SUCCESS = {
    "ok": True,
    "answer": "Hello **there**",
    "costUSD": 0.0123,
    "costKnown": True,
    "tokenUsage": {"promptTokens": 100, "completionTokens": 20, "totalTokens": 120},
    "toolCalls": [{"id": "c1", "name": "bash", "arguments": "{}"}],
    "artifacts": [],
}
INTERRUPTED = {"ok": False, "code": "interrupted", "error": "cancelled", "costUSD": 0}


@dataclass
class FakeRun:
    id: str
    body: dict[str, Any]
    state: str = "running"
    events: list[dict[str, Any]] = field(default_factory=list)
    pending: Any = None
    envelope: dict[str, Any] | None = None

    def view(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "state": self.state, "events": list(self.events)}
        if isinstance(self.body, dict) and "conversationId" in self.body:
            out["conversationId"] = self.body["conversationId"]
        if self.pending is not None:
            out["pending"] = self.pending
        if self.envelope is not None:
            out["envelope"] = self.envelope
        return out

    def finish(self, envelope: dict[str, Any], state: str = "completed") -> None:
        self.pending = None
        self.state = state
        self.envelope = envelope


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class FakeDaemon:
    """Just enough of `jazz daemon`'s HTTP API, with events a test can await."""

    def __init__(self) -> None:
        self.runs: dict[str, FakeRun] = {}
        self.seen: list[Seen] = []
        self.origins: list[str] = []
        self.answers: list[Seen] = []
        self.created = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.answered = asyncio.Event()
        self.polls = 0
        self._polled = asyncio.Condition()
        self.cancel_route = True
        self.start_status: int | None = None
        self.answer_failures: list[int] = []  # statuses the next answers get, not applied
        self.on_create: Callable[[FakeRun], None] = lambda run: None
        self.on_answer: Callable[[FakeRun, dict[str, Any]], None] = _resume_and_succeed
        self.url = ""

    @property
    def run(self) -> FakeRun:
        assert len(self.runs) == 1
        return next(iter(self.runs.values()))

    async def wait_polls(self, n: int) -> None:
        target = self.polls + n
        async with self._polled:
            await asyncio.wait_for(self._polled.wait_for(lambda: self.polls >= target), WAIT)

    @web.middleware
    async def gate(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body: Any = None
        if request.can_read_body:
            if request.content_type != "application/json":
                return web.json_response({"error": "JSON bodies only"}, status=415)
            body = await request.json()
        self.seen.append(Seen(request.method, request.path, dict(request.headers), body))
        if "Origin" in request.headers:
            self.origins.append(request.headers["Origin"])
            return web.json_response({"error": "Origin refused"}, status=403)
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            got = request.headers.get("Authorization", "")
            return web.json_response({"error": f"bad token {got!r}"}, status=401)
        request[BODY] = body
        return await handler(request)

    async def create(self, request: web.Request) -> web.Response:
        if self.start_status is not None:
            return web.json_response({"error": "daemon is sad"}, status=self.start_status)
        run = FakeRun(id=f"run-{len(self.runs) + 1}", body=request[BODY])
        self.runs[run.id] = run
        self.on_create(run)
        self.created.set()
        return web.json_response({"runId": run.id, "state": run.state}, status=201)

    async def get(self, request: web.Request) -> web.Response:
        run = self.runs.get(request.match_info["id"])
        if run is None:
            return web.json_response({"error": "no such run"}, status=404)
        view = run.view()
        async with self._polled:
            self.polls += 1
            self._polled.notify_all()
        return web.json_response(view)

    async def listing(self, request: web.Request) -> web.Response:
        """``GET /runs``: the active runs (the contract names the route, not its shape; this
        fake answers ``{"runs": [...]}``, each run as ``GET /runs/:id`` shows it)."""
        active = [run.view() for run in self.runs.values() if run.envelope is None]
        return web.json_response({"runs": active})

    async def answer(self, request: web.Request) -> web.Response:
        run = self.runs[request.match_info["id"]]
        body = request[BODY]
        self.answers.append(self.seen[-1])
        if self.answer_failures:
            status = self.answer_failures.pop(0)
            return web.json_response({"error": "daemon is sad"}, status=status)
        needs_operator = body.get("approved") is True or "response" in body or "secret" in body
        if needs_operator and request.headers.get("X-Jazz-Operator-Token") != OPERATOR:
            return web.json_response({"error": "operator token required"}, status=403)
        self.on_answer(run, body)
        self.answered.set()
        return web.json_response({"ok": True})

    async def cancel(self, request: web.Request) -> web.Response:
        if not self.cancel_route:
            return web.json_response({"error": "not found"}, status=404)
        return self._cancel(request)

    async def delete(self, request: web.Request) -> web.Response:
        return self._cancel(request)

    def _cancel(self, request: web.Request) -> web.Response:
        run = self.runs[request.match_info["id"]]
        run.finish(INTERRUPTED, state="cancelled")
        self.cancelled.set()
        return web.json_response({"ok": True})

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.gate])
        app.router.add_post("/runs", self.create)
        app.router.add_get("/runs", self.listing)
        app.router.add_get("/runs/{id}", self.get)
        app.router.add_delete("/runs/{id}", self.delete)
        app.router.add_post("/runs/{id}/answer", self.answer)
        app.router.add_post("/runs/{id}/cancel", self.cancel)
        return app


def _resume_and_succeed(run: FakeRun, body: dict[str, Any]) -> None:
    run.events.append({"type": "approval_resolved", **body})
    run.finish(SUCCESS)


@asynccontextmanager
async def serving(fake: FakeDaemon) -> AsyncIterator[FakeDaemon]:
    """Serve ``fake`` on 127.0.0.1 (a free port) until the block ends."""
    runner = web.AppRunner(fake.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    fake.url = f"http://{host}:{port}"
    try:
        yield fake
    finally:
        await runner.cleanup()
