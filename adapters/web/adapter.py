"""The web chat's adapter: its routes on the gateway's aiohttp server, around the core.

The parts, each a module of its own: :mod:`.auth` (who may use the chat: the token, the
browser guard, a conversation's account refused), :mod:`.login` (the page's login with
the token), :mod:`.api` (a thread's messages posted and read, :mod:`.thread_view`, its
buttons pressed), :mod:`.files` (the files it was sent), :mod:`.streams` (a thread's
replies as server-sent events) and :mod:`.surface` (the replies the core sends, kept and
published). This module
wires them to the gateway's lifecycle.
"""

from __future__ import annotations

from aiohttp import web

from bridge import rules
from bridge.http.server import gate_bodies
from bridge.ports import AdapterContext

from .api import ThreadApi
from .auth import WebAuth
from .files import ThreadFiles
from .spec import check
from .streams import EventStreams
from .surface import WebSurface


class WebAdapter:
    name = "web"

    def __init__(self, ctx: AdapterContext) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.surface = WebSurface()
        self._auth = WebAuth(ctx)
        self._api = ThreadApi(ctx, self._auth, self.surface)
        self._streams = EventStreams(ctx, self._auth, self.surface)
        self._files = ThreadFiles(ctx, self._auth)

    # -- lifecycle ----------------------------------------------------------------------------

    async def initialize(self) -> None:
        # the spec's rules: serve applied them already, but no adapter opens without them
        rules.refuse(check(self.settings, self.ctx.core))

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self._streams.close()  # event streams opened from now on are refused (503)

    async def shutdown(self) -> None:
        return None

    def health(self) -> str | None:
        return None

    # -- routes -------------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        guard = self._auth.guard
        app.router.add_get("/", guard(self._api.page))
        app.router.add_post("/login", guard(self._api.login.post))
        app.router.add_post("/api/threads/{thread}/messages", guard(self._api.post_message))
        app.router.add_get("/api/threads/{thread}/messages", guard(self._api.get_messages))
        app.router.add_post("/api/threads/{thread}/choices", guard(self._api.post_choice))
        app.router.add_get("/api/threads/{thread}/events", guard(self._streams.handle))
        app.router.add_get("/api/threads/{thread}/files", guard(self._files.handle))
        gate_bodies(app, "/api/", self._auth.refusal)  # with a token, no body read without it
