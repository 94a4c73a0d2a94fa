"""Telegram intake (webhook route or long polling) around python-telegram-bot's Application.

The Application is built without its own updater: in webhook mode the gateway's aiohttp
server owns ``POST /telegram/webhook`` (:mod:`.webhook`); in polling mode this adapter
drives ``getUpdates`` itself in one tracked task (:mod:`.polling`). Either way an update is
handed to the core's ``submit`` (which persists it) before Telegram is acknowledged: the
200, or the polling offset moving on. ``{bot id}:{update_id}`` is the dedupe key, so a
redelivered update never runs twice.

This module is the lifecycle and the one dispatch every update goes through
(:meth:`TelegramAdapter.process`): a message to :mod:`.intake`, a button press to
:mod:`.presses`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from typing import Any

from aiohttp import web
from telegram import BotCommand
from telegram.error import InvalidToken, TelegramError
from telegram.ext import Application, ApplicationBuilder

from bridge import rules
from bridge.errors import AdapterError
from bridge.ports import AdapterContext, SubmitStatus

from .api import BotApi
from .beside import Beside
from .inbound import Rules, normalize_ids
from .intake import UpdateIntake
from .moves import ChatMoves
from .polling import Polling
from .presses import CallbackPresses
from .spec import TelegramSettings, check
from .surface import TelegramSurface
from .transport import AiohttpRequest, env_proxy
from .update_json import Update
from .webhook import Webhook

log = logging.getLogger(__name__)

# the bot's command menu (setMyCommands), set again only when it changed
COMMANDS: tuple[tuple[str, str], ...] = (
    ("start", "What this bot does"),
    ("help", "How to talk to the agent, and the commands"),
    ("new", "Start a fresh conversation (files stay)"),
    ("status", "What is running, what waits, the last run's cost"),
    ("stop", "Stop the current run"),
)
SEND_POOL = 256  # keep-alive connections for every method but getUpdates (PTB's default)


class TelegramAdapter:
    name = "telegram"

    def __init__(self, ctx: AdapterContext) -> None:
        self.ctx = ctx
        self.settings: TelegramSettings = ctx.settings
        s = self.settings
        if s.token is None:
            raise AdapterError("telegram.token is not set")
        self.mode = s.resolved_mode
        self._updates_request = AiohttpRequest(pool_size=1, proxy=env_proxy(s.api_url))
        self.application: Application[Any, Any, Any, Any, Any, Any] = (
            ApplicationBuilder()
            .token(s.token.get_secret_value())
            .base_url(s.api_url)
            .base_file_url(s.resolved_file_url)
            .request(AiohttpRequest(pool_size=SEND_POOL, proxy=env_proxy(s.api_url)))
            .get_updates_request(self._updates_request)
            .updater(None)
            .build()
        )
        self.bot = self.application.bot
        self._api = BotApi(self.bot, updates_request=self._updates_request)
        self._surface = TelegramSurface(
            self.bot, min_interval_s=s.min_send_interval_s, api=self._api
        )
        self.rules: Rules | None = None
        self._initialized = False
        # set at stop: ends the webhook registrar's and the offset writer's pauses
        self._stopped = asyncio.Event()
        # calls made beside the core, waited for (briefly) at shutdown: polled presses'
        # edits, words to a sender the core does not take
        self._beside = Beside()
        self._webhook = Webhook(
            ctx,
            self.bot,
            enabled=self.mode == "webhook",
            stopped=self._stopped,
            process=self.process,
            ready=lambda: self.rules is not None,
        )
        # built at initialize, once the bot's id and name are known
        self._intake: UpdateIntake | None = None
        self._presses: CallbackPresses | None = None
        self._polling: Polling | None = None  # polling mode only

    @property
    def surface(self) -> TelegramSurface:
        return self._surface

    # -- lifecycle ----------------------------------------------------------------------------

    async def initialize(self) -> None:
        s = self.settings
        # the spec's rules: serve applied them already, but no adapter opens without them
        rules.refuse(check(s, self.ctx.core))
        try:
            await self.application.initialize()  # getMe: checks the token
        except InvalidToken as exc:
            raise AdapterError(f"telegram.token was refused by the Bot API: {exc}") from exc
        except TelegramError as exc:
            raise AdapterError(f"cannot reach the Telegram Bot API at {s.api_url}: {exc}") from exc
        self._initialized = True
        me = self.bot.bot
        self.rules = Rules(
            bot_id=me.id,
            bot_username=me.username or "",
            allowed_chats=normalize_ids(s.allowed_chats),
            allowed_users=normalize_ids(s.allowed_users),
            allow_everyone=s.allow_everyone,
            operators=normalize_ids(s.operators),
            group_trigger=s.group_trigger,
        )
        log.info("telegram: bot @%s (%d), %s mode", me.username, me.id, self.mode)
        moves = ChatMoves(self.ctx.store, self._kv("moved-chats"))
        self._intake = UpdateIntake(self.ctx, self._surface, self.rules, moves, self._beside)
        self._presses = CallbackPresses(
            self.ctx,
            self.bot,
            self._surface,
            self.rules,
            self._intake.keyed_on,
            polled=self.mode == "polling",
            beside=self._beside,
        )
        if self.mode == "polling":
            self._polling = Polling(
                self.ctx,
                self.bot,
                self._api,
                self._updates_request,
                offset_key=self._kv("offset"),
                stopped=self._stopped,
                process=self.process,
                look_ahead=self._intake.look_ahead,
            )

    def _kv(self, name: str) -> str:
        assert self.rules is not None
        return f"telegram:{self.rules.bot_id}:{name}"

    async def start(self) -> None:
        if self._intake is not None:
            await self._intake.moves.load()
        await self._sync_commands()
        if self.mode == "webhook":
            self._stopped.clear()
            await self._webhook.start()
            return
        assert self._polling is not None
        await self._polling.delete_webhook()  # failed: the poll loop deletes it at a 409
        self._stopped.clear()
        self._polling.start()

    async def stop(self) -> None:
        self._stopped.set()
        await self._webhook.stop()
        if self._polling is not None:
            await self._polling.stop()

    async def shutdown(self) -> None:
        await self._beside.drain()  # they need the bot's connection too
        await self._surface.close()  # its held edits need the bot's connection
        if self._initialized:
            self._initialized = False
            await self.application.shutdown()

    def health(self) -> str | None:
        polling = self._polling.health() if self._polling is not None else None
        return polling or self._webhook.error

    async def _sync_commands(self) -> None:
        """setMyCommands only when the list changed since the last call that succeeded."""
        digest = hashlib.sha256(json.dumps(COMMANDS).encode()).hexdigest()
        key = self._kv("commands-sha256")
        if await self.ctx.store.get_kv(key) == digest:
            return
        try:
            await self.bot.set_my_commands([BotCommand(c, d) for c, d in COMMANDS])
        except TelegramError as exc:
            log.warning("telegram: setMyCommands failed (tried again at the next start): %s", exc)
            return
        await self.ctx.store.set_kv(key, digest)

    # -- updates ------------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        self._webhook.add_to(app)

    async def process(self, update: Update) -> SubmitStatus | None:
        """Hand one update to the core; returns only after it is persisted (or dropped)."""
        assert self._intake is not None and self._presses is not None
        if (query := update.get("callback_query")) is not None:
            await self._presses.on_callback(query)
            return None
        return await self._intake.take(update)
