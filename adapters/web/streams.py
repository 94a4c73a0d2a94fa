"""``GET /api/threads/{thread}/events``: a thread's replies as server-sent events.

Each open stream is a queue in the surface's listeners (:class:`~.surface.WebSurface`
publishes to it). A stream that resumes (``Last-Event-ID``) first gets what it missed
from the replay log (:mod:`.replay`), or a ``gap`` event when that is no longer all kept;
a stream whose client stopped reading is ended after its backlog, and at the gateway's
stop every stream is ended and new ones are refused (an EventSource does not reconnect
after a 503).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from bridge.ports import AdapterContext

from .answers import bad
from .auth import WebAuth
from .surface import LAGGING, WebSurface

SSE_HEARTBEAT_S = 15.0
GAP_TEXT = "Some events were missed: read GET /api/threads/{}/messages again."


class EventStreams:
    """The event streams' handler, and their end at stop."""

    def __init__(self, ctx: AdapterContext, auth: WebAuth, surface: WebSurface) -> None:
        self.ctx = ctx
        self.auth = auth
        self.surface = surface
        self._closing = False

    def close(self) -> None:
        """End every open stream; streams opened from now on are refused (503)."""
        self._closing = True
        for queues in self.surface.listeners.values():
            for queue in queues:
                queue.put_nowait({"type": "closing"})

    def _missed(self, request: web.Request, thread: str) -> bytes:
        """What a stream starts with: for one that resumes (``Last-Event-ID``), the events it
        missed, or a ``gap`` event when they are no longer all kept; then the id to resume
        from (an id with no data: a stream that got no event yet resumes from here too)."""
        start = f"id: {self.surface.recent.current_id()}\n\n".encode()
        last = request.headers.get("Last-Event-ID")
        if last is None:
            return start
        events = self.surface.recent.since(thread, last)
        if events is None:
            return _sse({"type": "gap", "text": GAP_TEXT.format(thread)}) + start
        return b"".join(_sse(e) for e in events) + start

    async def handle(self, request: web.Request) -> web.StreamResponse:
        thread = self.auth.admitted(request)
        if isinstance(thread, web.Response):
            return thread
        if self._closing:  # an EventSource does not reconnect after an answer that is not 200
            return bad("the gateway is stopping", 503)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
        )
        await response.prepare(request)
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        # no await between the replay and listening: nothing is missed, nothing sent twice
        missed = self._missed(request, thread)
        self.surface.listeners.setdefault(thread, set()).add(queue)
        try:
            await response.write(b": connected\n\n")
            await response.write(missed)
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), timeout=SSE_HEARTBEAT_S)
                except TimeoutError:
                    await response.write(b": heartbeat\n\n")
                    continue
                if event.get("type") in ("closing", LAGGING):
                    break  # lagging: an EventSource reconnects with the last id it got
                await response.write(_sse(event))
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            queues = self.surface.listeners.get(thread, set())
            queues.discard(queue)
            if not queues:  # the thread's last stream: its name is forgotten with it
                self.surface.listeners.pop(thread, None)
        return response


def _sse(event: dict[str, Any]) -> bytes:
    """One server-sent event: its id (when it has one), type and JSON data."""
    head = f"id: {event['id']}\n" if "id" in event else ""
    return f"{head}event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
