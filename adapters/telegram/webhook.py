"""Telegram's webhook: ``POST /telegram/webhook`` on the gateway's aiohttp server, and
its registration with the Bot API (``setWebhook``, tried again until it holds).

Thin around the intake, as slack-bolt's HTTP adapters are around their app: the secret
header is checked before the body is read (:func:`bridge.http.server.gate_bodies`), the
body's shape by :mod:`.guard` and :mod:`.buildable`, then the update, as JSON, goes to the
adapter's ``process``; the 200 comes only once it is persisted, a refusal (the gateway
stopping) is a 503 so Telegram delivers it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from telegram import Bot
from telegram.error import TelegramError

from bridge.http.server import gate_bodies
from bridge.ports import AdapterContext, SubmitStatus

from . import buildable, guard
from .intake import ALLOWED_UPDATES
from .update_json import Update

log = logging.getLogger(__name__)

WEBHOOK_PATH = "/telegram/webhook"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"  # noqa: S105 (a header name)
MAX_BACKOFF_S = 30.0  # between setWebhook attempts


class Webhook:
    """The webhook's route and its registration."""

    def __init__(
        self,
        ctx: AdapterContext,
        bot: Bot,
        *,
        enabled: bool,
        stopped: asyncio.Event,
        process: Callable[[Update], Awaitable[SubmitStatus | None]],
        ready: Callable[[], bool],
    ) -> None:
        self.ctx = ctx
        secret = ctx.settings.webhook_secret
        self._secret = secret.get_secret_value().encode() if secret else None
        self._bot = bot
        self._enabled = enabled  # the adapter is in webhook mode
        self._stopped = stopped  # set by the adapter's stop
        self._process = process
        self._ready = ready  # initialized: the bot's rules are known
        self._registrar: asyncio.Task[None] | None = None  # setWebhook again after a failure
        self.error: str | None = None  # the last setWebhook's failure, for /healthz

    async def start(self) -> None:
        if self.ctx.settings.webhook_url and not await self._set():
            # until it is set Telegram delivers nothing: tried again, the error in /healthz
            self._registrar = asyncio.create_task(self._register(), name="telegram-set-webhook")

    async def stop(self) -> None:
        """Wait for the registrar (the adapter's stop ended its pause)."""
        if self._registrar is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._registrar
            self._registrar = None

    def add_to(self, app: web.Application) -> None:
        app.router.add_post(WEBHOOK_PATH, self.handle)
        gate_bodies(app, WEBHOOK_PATH, self.refusal)  # no body read before the secret

    async def _set(self) -> bool:
        """Register the webhook; whether it is (the failure noted for /healthz)."""
        assert self.ctx.settings.webhook_url is not None
        try:
            await self._bot.set_webhook(
                url=self.ctx.settings.webhook_url,
                secret_token=self._secret.decode() if self._secret else None,
                allowed_updates=ALLOWED_UPDATES,
            )
        except (TelegramError, OSError) as exc:
            self.error = f"setWebhook failed: {exc}"
            log.error("telegram: %s", self.error)
            return False
        self.error = None
        return True

    async def _register(self) -> None:
        backoff = 1.0
        while not self._stopped.is_set():
            with contextlib.suppress(TimeoutError):  # a pace, ended early by stop()
                await asyncio.wait_for(self._stopped.wait(), backoff)
            if self._stopped.is_set() or await self._set():
                return
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def refusal(self, request: web.Request) -> web.Response | None:
        """Why the request cannot be Telegram's, from its headers, or None."""
        if not self._enabled or self._secret is None:
            return web.Response(status=404, text="telegram is not in webhook mode")
        # surrogateescape: header bytes that are not UTF-8 compare (and fail) as bytes
        given = request.headers.get(SECRET_HEADER, "").encode("utf-8", "surrogateescape")
        if not hmac.compare_digest(given, self._secret):
            self.ctx.metrics.auth_failures.labels("telegram", "secret").inc()
            log.warning("telegram webhook: wrong or missing %s", SECRET_HEADER)
            return web.Response(status=403, text="wrong or missing secret token")
        return None

    async def handle(self, request: web.Request) -> web.Response:
        refused = self.refusal(request)  # the gate saw it; a route without a body too
        if refused is not None:
            return refused
        if not self._ready():
            return web.Response(status=503, text="not started")
        raw = await request.read()  # over server.max_body_bytes: 413 (the server counts it)
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):  # bad JSON or UTF-8; nested past the stack
            return web.Response(status=400, text="body is not valid JSON")
        problem = guard.problem(data)
        if problem is not None:
            log.warning("telegram webhook: refused an update: %s", problem)
            self.ctx.metrics.messages.labels("telegram", "malformed").inc()
            return web.Response(status=400, text=f"body is not a Telegram update: {problem}")
        try:
            update = buildable.read(data, self._bot)
        except buildable.Unreadable as exc:  # PTB would not build it
            return web.Response(status=400, text=f"body is not a Telegram update: {exc}")
        status = await self._process(update)
        if status is SubmitStatus.REFUSED:
            return web.Response(status=503, text="the gateway is shutting down; retry")
        return web.Response(status=200)
