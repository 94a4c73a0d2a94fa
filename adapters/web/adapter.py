"""The web chat's adapter: its routes on the gateway's aiohttp server, around the core.

The parts, each a module of its own: :mod:`.auth` (who may use the chat: the token, the
browser guard, a conversation's account refused), :mod:`.login` (the page's login with
the token), :mod:`.api` (a thread's messages posted and read, :mod:`.thread_view`, its
buttons pressed), :mod:`.files` (the files it was sent), :mod:`.streams` (a thread's
replies as server-sent events), :mod:`.surface` (the replies the core sends, kept and
published), :mod:`.form` and :mod:`.uploads` (the files a message comes with, kept until
its turn). This module wires them to the gateway's lifecycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from aiohttp import web

from bridge import rules
from bridge.http.server import gate_bodies, streamed
from bridge.model import InboxState
from bridge.ports import AdapterContext

from .api import ThreadApi
from .auth import WebAuth
from .files import ThreadFiles
from .form import FormReader
from .spec import check
from .streams import EventStreams
from .surface import WebSurface
from .uploads import StagedUploads

log = logging.getLogger(__name__)

SWEEP_EVERY_S = 3600.0  # staged uploads no message took: looked for at start, then so often


class WebAdapter:
    name = "web"

    def __init__(self, ctx: AdapterContext) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.uploads = StagedUploads(Path(ctx.core.root))
        self.surface = WebSurface(self.uploads)
        self._auth = WebAuth(ctx)
        forms = FormReader(self.uploads, ctx.core.limits.max_attachment_bytes)
        self._api = ThreadApi(ctx, self._auth, self.surface, forms)
        self._sweeper: asyncio.Task[None] | None = None
        self._streams = EventStreams(ctx, self._auth, self.surface)
        self._files = ThreadFiles(ctx, self._auth)

    # -- lifecycle ----------------------------------------------------------------------------

    async def initialize(self) -> None:
        # the spec's rules: serve applied them already, but no adapter opens without them
        rules.refuse(check(self.settings, self.ctx.core))

    async def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_uploads(), name="web-upload-sweep")

    async def stop(self) -> None:
        self._streams.close()  # event streams opened from now on are refused (503)
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None

    async def sweep_uploads(self) -> int:
        """Remove the staged uploads no message will take (:meth:`StagedUploads.sweep`): all
        but those of the web messages still waiting for their turn; how many went."""
        waiting = [
            *await self.ctx.store.messages_in_state(InboxState.ACCEPTED),
            *await self.ctx.store.messages_in_state(InboxState.RUNNING),
        ]
        keep = {
            str(a.get("platform_id"))
            for m in waiting
            if m.platform == "web"
            for a in m.attachments
            if a.get("platform_id")
        }
        return await asyncio.to_thread(self.uploads.sweep, keep)

    async def _sweep_uploads(self) -> None:
        while True:
            try:
                await self.sweep_uploads()
            except Exception:  # never the end of the sweeps: the next one tries again
                log.exception("web: sweeping the staged uploads failed")
            await asyncio.sleep(SWEEP_EVERY_S)

    async def shutdown(self) -> None:
        return None

    def health(self) -> str | None:
        return None

    # -- routes -------------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        guard = self._auth.guard
        app.router.add_get("/", guard(self._api.page))
        app.router.add_post("/login", guard(self._api.login.post))
        messages = guard(self._api.post_message, forms=True)  # JSON, or a form with files
        streamed(app, app.router.add_post("/api/threads/{thread}/messages", messages))
        app.router.add_get("/api/threads/{thread}/messages", guard(self._api.get_messages))
        app.router.add_post("/api/threads/{thread}/choices", guard(self._api.post_choice))
        app.router.add_get("/api/threads/{thread}/events", guard(self._streams.handle))
        app.router.add_get("/api/threads/{thread}/files", guard(self._files.handle))
        gate_bodies(app, "/api/", self._auth.refusal)  # with a token, no body read without it
