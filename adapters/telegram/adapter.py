"""Telegram intake (webhook route or long polling) around python-telegram-bot's Application.

The Application is built without its own updater: in webhook mode the gateway's aiohttp
server owns ``POST /telegram/webhook``; in polling mode this adapter drives ``getUpdates``
itself in one tracked task. Either way an update is handed to the core's ``submit`` (which
persists it) before Telegram is acknowledged: the 200, or the polling offset moving on.
``{bot id}:{update_id}`` is the dedupe key, so a redelivered update never runs twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import warnings
from collections import OrderedDict
from collections.abc import Coroutine, Sequence
from typing import Any

from aiohttp import web
from telegram import BotCommand, CallbackQuery, Message, Update
from telegram.error import Conflict, InvalidToken, RetryAfter, TelegramError
from telegram.ext import Application, ApplicationBuilder
from telegram.warnings import PTBUserWarning

from bridge import rules
from bridge.errors import AdapterError
from bridge.http.server import gate_bodies
from bridge.model import Inbound, Outgoing, ReplyKind, ReplyTarget
from bridge.ports import AdapterContext, DeliveryError, SubmitStatus
from bridge.presses import (
    NOT_ALLOWED_TEXT,
    PRESS_FAILED_TEXT,
    MessageChange,
    PressPlan,
    press_plan,
)
from bridge.store import StoreError

from . import convert, guard
from .moves import ChatMoves
from .spec import TelegramSettings, check
from .surface import TelegramSurface, retry_seconds
from .transport import AiohttpRequest, env_proxy

log = logging.getLogger(__name__)
WEBHOOK_PATH = "/telegram/webhook"

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"  # noqa: S105 (a header name)
ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]
MAX_TOAST = 200  # answerCallbackQuery's text limit
MAX_BACKOFF_S = 30.0
SEND_POOL = 256  # keep-alive connections for every method but getUpdates (PTB's default)
# albums one part of which addressed the bot in a group, remembered so their other parts
# (uncaptioned: no mention) are let in; an album's parts come within a second of each other
ALBUMS_KEPT = 1024
OFFSET_HINT_EVERY_S = 1.0  # the stored polling offset (a restart hint) at most once a second
# what holds the polling offset back: a write that may succeed when the update is fetched again
RETRIED_FAILURES: tuple[type[BaseException], ...] = (StoreError, OSError)
SETTLE_GRACE_S = 1.0  # at shutdown, for the edits of pressed messages still under way


class TelegramAdapter:
    name = "telegram"

    def __init__(self, ctx: AdapterContext) -> None:
        self.ctx = ctx
        self.settings: TelegramSettings = ctx.settings
        s = self.settings
        if s.token is None:
            raise AdapterError("telegram.token is not set")
        self.mode = s.resolved_mode
        self._secret = s.webhook_secret.get_secret_value().encode() if s.webhook_secret else None
        self.application: Application[Any, Any, Any, Any, Any, Any] = (
            ApplicationBuilder()
            .token(s.token.get_secret_value())
            .base_url(s.api_url)
            .base_file_url(s.resolved_file_url)
            .request(AiohttpRequest(pool_size=SEND_POOL, proxy=env_proxy(s.api_url)))
            .get_updates_request(AiohttpRequest(pool_size=1, proxy=env_proxy(s.api_url)))
            .updater(None)
            .build()
        )
        self.bot = self.application.bot
        self._surface = TelegramSurface(self.bot, min_interval_s=s.min_send_interval_s)
        self.rules: convert.Rules | None = None
        self._poller: asyncio.Task[None] | None = None
        self._registrar: asyncio.Task[None] | None = None  # setWebhook again after a failure
        self._offset_writer: asyncio.Task[None] | None = None
        self._offset_due: int | None = None
        self._initialized = False
        self._stopping = False
        self._stopped = asyncio.Event()  # ends the offset writer's pause at stop
        self._error: str | None = None
        self._addressed_albums: OrderedDict[str, None] = OrderedDict()  # see ALBUMS_KEPT
        self._moves: ChatMoves | None = None  # groups upgraded to supergroups (moves.py)
        self._unreadable: dict[int, str] = {}  # polled updates PTB cannot build (_get_updates)
        # calls made beside the core, waited for (briefly) at shutdown: polled presses'
        # edits (_on_callback), words to a sender the core does not take (_tell)
        self._settles: set[asyncio.Task[None]] = set()

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
        self.rules = convert.Rules(
            bot_id=me.id,
            bot_username=me.username or "",
            allowed_chats=convert.normalize_ids(s.allowed_chats),
            allowed_users=convert.normalize_ids(s.allowed_users),
            allow_everyone=s.allow_everyone,
            operators=convert.normalize_ids(s.operators),
            group_trigger=s.group_trigger,
        )
        log.info("telegram: bot @%s (%d), %s mode", me.username, me.id, self.mode)
        self._moves = ChatMoves(self.ctx.store, self._kv("moved-chats"))

    def _kv(self, name: str) -> str:
        assert self.rules is not None
        return f"telegram:{self.rules.bot_id}:{name}"

    async def start(self) -> None:
        if self._moves is not None:
            await self._moves.load()
        await self._sync_commands()
        if self.mode == "webhook":
            self._stopping = False
            self._stopped.clear()
            if self.settings.webhook_url and not await self._set_webhook():
                # until it is set Telegram delivers nothing: tried again, the error in /healthz
                self._registrar = asyncio.create_task(
                    self._register_webhook(), name="telegram-set-webhook"
                )
            return
        await self._delete_webhook()  # failed: the poll loop deletes it at getUpdates' 409
        self._stopping = False
        self._stopped.clear()
        self._poller = asyncio.create_task(self._poll(), name="telegram-polling")

    async def _set_webhook(self) -> bool:
        """Register the webhook; whether it is (the failure noted for /healthz)."""
        assert self.settings.webhook_url is not None
        try:
            await self.bot.set_webhook(
                url=self.settings.webhook_url,
                secret_token=self._secret.decode() if self._secret else None,
                allowed_updates=ALLOWED_UPDATES,
            )
        except (TelegramError, OSError) as exc:
            self._error = f"setWebhook failed: {exc}"
            log.error("telegram: %s", self._error)
            return False
        self._error = None
        return True

    async def _register_webhook(self) -> None:
        backoff = 1.0
        while not self._stopping:
            with contextlib.suppress(TimeoutError):  # a pace, ended early by stop()
                await asyncio.wait_for(self._stopped.wait(), backoff)
            if self._stopping or await self._set_webhook():
                return
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _delete_webhook(self) -> None:
        """getUpdates is refused (409 Conflict) while a webhook is set: remove it."""
        try:
            await self.bot.delete_webhook()
        except (TelegramError, OSError) as exc:
            log.warning(
                "telegram: deleteWebhook failed (tried again if getUpdates is refused): %s", exc
            )

    async def stop(self) -> None:
        self._stopping = True
        self._stopped.set()
        if self._registrar is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._registrar
            self._registrar = None
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._poller
            self._poller = None
        if self._offset_writer is not None:  # the last offset is stored before the store closes
            with contextlib.suppress(Exception):
                await self._offset_writer
            self._offset_writer = None

    async def shutdown(self) -> None:
        if self._settles:  # they need the bot's connection too
            await asyncio.wait(self._settles, timeout=SETTLE_GRACE_S)
            for task in self._settles:
                task.cancel()
            await asyncio.gather(*self._settles, return_exceptions=True)
        await self._surface.close()  # its held edits need the bot's connection
        if self._initialized:
            self._initialized = False
            await self.application.shutdown()

    def health(self) -> str | None:
        if self._poller is not None and self._poller.done() and not self._stopping:
            return self._error or "telegram polling stopped"
        return self._error

    async def _sync_commands(self) -> None:
        """setMyCommands only when the list changed since the last call that succeeded."""
        digest = hashlib.sha256(json.dumps(convert.COMMANDS).encode()).hexdigest()
        key = self._kv("commands-sha256")
        if await self.ctx.store.get_kv(key) == digest:
            return
        try:
            await self.bot.set_my_commands([BotCommand(c, d) for c, d in convert.COMMANDS])
        except TelegramError as exc:
            log.warning("telegram: setMyCommands failed (tried again at the next start): %s", exc)
            return
        await self.ctx.store.set_kv(key, digest)

    # -- webhook ------------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(WEBHOOK_PATH, self.webhook)
        gate_bodies(app, WEBHOOK_PATH, self._refusal)  # no body read before the secret

    def _refusal(self, request: web.Request) -> web.Response | None:
        """Why the request cannot be Telegram's, from its headers, or None."""
        if self.mode != "webhook" or self._secret is None:
            return web.Response(status=404, text="telegram is not in webhook mode")
        # surrogateescape: header bytes that are not UTF-8 compare (and fail) as bytes
        given = request.headers.get(SECRET_HEADER, "").encode("utf-8", "surrogateescape")
        if not hmac.compare_digest(given, self._secret):
            self.ctx.metrics.auth_failures.labels("telegram", "secret").inc()
            log.warning("telegram webhook: wrong or missing %s", SECRET_HEADER)
            return web.Response(status=403, text="wrong or missing secret token")
        return None

    async def webhook(self, request: web.Request) -> web.Response:
        refused = self._refusal(request)  # the gate saw it; a route without a body too
        if refused is not None:
            return refused
        if self.rules is None:
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
            update = Update.de_json(data, self.bot)
        except Exception as exc:  # a pure parse of checked input; whatever it raises is the input's
            return web.Response(status=400, text=f"body is not a Telegram update: {exc}")
        status = await self.process(update)
        if status is SubmitStatus.REFUSED:
            return web.Response(status=503, text="the gateway is shutting down; retry")
        return web.Response(status=200)

    # -- one update ---------------------------------------------------------------------------

    async def process(self, update: Update) -> SubmitStatus | None:
        """Hand one update to the core; returns only after it is persisted (or dropped)."""
        assert self.rules is not None
        metrics = self.ctx.metrics.messages
        if update.callback_query is not None:
            await self._on_callback(update.callback_query)
            return None
        message = update.message
        if message is None:
            kind = "edited message" if update.edited_message is not None else "update"
            log.debug("telegram: %s %d ignored", kind, update.update_id)
            metrics.labels("telegram", "ignored").inc()
            return None
        if message.migrate_to_chat_id or message.migrate_from_chat_id:
            await self._note_move(message)
            metrics.labels("telegram", "ignored").inc()
            return None
        try:
            result = convert.to_inbound(
                update.update_id,
                message,
                self.rules,
                self._addressed_albums.keys(),
                keyed_on=self._keyed_on(message.chat.id),
            )
        except Exception:
            log.exception("telegram: update %d could not be read; dropped", update.update_id)
            metrics.labels("telegram", "ignored").inc()
            return None
        if isinstance(result, convert.Ignored):
            log.info("telegram: update %d %s: %s", update.update_id, result.outcome, result.reason)
            metrics.labels("telegram", result.outcome).inc()
            if result.tell is not None:
                self._beside(
                    self._tell(update.update_id, result), f"telegram-tell-{update.update_id}"
                )
            return None
        if result.part_of is not None:  # its other parts are let in too (see to_inbound)
            self._addressed(result.part_of)
        submitted = await self.ctx.gateway.submit(result)
        return submitted.status

    def _keyed_on(self, chat_id: int) -> int:
        """The chat id a chat's conversations are keyed on (moves.py)."""
        return self._moves.keyed_on(chat_id) if self._moves is not None else chat_id

    async def _note_move(self, message: Message) -> None:
        """A group became a supergroup: its conversations follow it (moves.py)."""
        if self._moves is None:
            return
        if message.migrate_to_chat_id:  # posted in the old chat
            await self._moves.note(message.chat.id, int(message.migrate_to_chat_id))
        elif message.migrate_from_chat_id:  # posted in the new one
            await self._moves.note(int(message.migrate_from_chat_id), message.chat.id)

    def _addressed(self, album: str) -> None:
        """Remember an album one part of which addressed the bot (see ALBUMS_KEPT)."""
        self._addressed_albums[album] = None
        self._addressed_albums.move_to_end(album)
        while len(self._addressed_albums) > ALBUMS_KEPT:
            self._addressed_albums.popitem(last=False)

    def _look_ahead(self, updates: Sequence[Update]) -> None:
        """Note the albums of a polled batch that one of their parts addresses to the bot.

        In a group only the part with the caption mentions the bot, and a client may put
        the caption on any part, not only the first: taken in order, the parts before it
        would be ignored. A batch usually holds a whole album, so its addressed albums are
        known before any of its parts is taken. (A webhook gets the parts one request at a
        time: there a part before the captioned one is still ignored.)
        """
        assert self.rules is not None
        for update in updates:
            message = update.message
            if message is None or message.media_group_id is None:
                continue
            if message.chat.type not in convert.SHARED_CHAT_TYPES:
                continue
            with contextlib.suppress(Exception):  # process() logs it when it meets the update
                result = convert.to_inbound(
                    update.update_id, message, self.rules, keyed_on=self._keyed_on(message.chat.id)
                )
                if isinstance(result, Inbound) and result.part_of is not None:
                    self._addressed(result.part_of)

    async def _on_callback(self, query: CallbackQuery) -> None:
        """Handle a press, answer its query, then edit the pressed message.

        The answer goes first: the button spins until it arrives, and the edit waits for
        the chat's pace (seconds in a group) and may be slow or fail; neither delays it.
        A polled press's edit goes on in the background: the rest of its batch, every
        chat's messages, waited for it (up to the client's timeout on a slow Telegram).
        """
        assert self.rules is not None
        user = query.from_user
        message = query.message
        chat = message.chat if message is not None else None
        text, alert = "", False
        pressed: tuple[Message, PressPlan] | None = None
        try:
            if not self.rules.user_allowed(
                user,
                chat.id if chat else None,
                getattr(chat, "username", None),
                self._keyed_on(chat.id) if chat else None,
            ):
                self.ctx.metrics.messages.labels("telegram", "denied").inc()
                text, alert = NOT_ALLOWED_TEXT, True
            elif query.data:
                result = await self.ctx.gateway.press(
                    query.data,
                    str(user.id),
                    is_operator=self.rules.is_operator(user),
                    actor_name=convert.display_name(user),
                )
                plan = press_plan(query.data, result)
                text, alert = plan.text, plan.refused  # always answered: the button spins
                if isinstance(message, Message):
                    pressed = (message, plan)
        except Exception:
            log.exception("telegram: callback query %s failed", query.id)
            text, alert = PRESS_FAILED_TEXT, True
        finally:
            try:  # every callback query is answered, or the button spins
                await self.bot.answer_callback_query(
                    query.id, text=_toast(text) or None, show_alert=alert
                )
            except TelegramError as exc:
                log.info("telegram: answerCallbackQuery failed: %s", exc)
        if pressed is None:
            return
        settle = self._settle_press(query.id, *pressed)
        if self.mode != "polling":
            await settle  # only this update's 200 waits for it
            return
        # polled, the batch behind the press (every chat's messages) would wait for the edit
        self._beside(settle, f"telegram-settle-{query.id}")

    def _beside(self, call: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(call, name=name)
        self._settles.add(task)
        task.add_done_callback(self._settles.discard)

    async def _tell(self, update_id: int, ignored: convert.Ignored) -> None:
        """Say why a message the core does not take gets no answer, quoting it in a group
        (an error, as a refused run is said). Best effort: not stored, not retried."""
        assert ignored.tell is not None and ignored.target is not None
        chat, topic = int(ignored.target["chat_id"]), ignored.target.get("thread_id")
        target = ReplyTarget(
            surface="telegram",
            thread_key=convert.thread_key(chat, int(topic) if topic is not None else None),
            context=dict(ignored.target),
        )
        try:
            await self._surface.send(
                target, Outgoing(ReplyKind.ERROR, ignored.tell), reply_key=f"told:{update_id}"
            )
        except DeliveryError as exc:
            log.info(
                "telegram: could not tell chat %s why update %d is ignored: %s",
                chat,
                update_id,
                exc,
            )

    async def _settle_press(self, query_id: str, message: Message, plan: PressPlan) -> None:
        try:
            await self._settle(message, plan)
        except Exception:  # the press is handled and answered; only its message is stale
            log.exception("telegram: could not update the message of press %s", query_id)

    async def _settle(self, message: Message, plan: PressPlan) -> None:
        """The pressed message as the press left it (:func:`bridge.presses.press_plan`)."""
        chat, message_id = message.chat.id, message.message_id
        try:
            if plan.change is MessageChange.EDIT and plan.resolved is not None:
                await self.surface.edit_message(chat, message_id, plan.resolved)
            elif plan.change is MessageChange.SETTLE and plan.resolved is not None:
                await self.surface.settle_message(chat, message_id, plan.resolved)
            elif plan.change is MessageChange.DROP_BUTTONS:
                await self.surface.remove_keyboard(chat, message_id)
        except DeliveryError as exc:
            log.info("telegram: could not update the prompt message: %s", exc)

    # -- polling ------------------------------------------------------------------------------

    async def _poll(self) -> None:
        try:
            await self._poll_loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._error = f"telegram polling failed: {exc}"
            log.exception("telegram: polling stopped")

    async def _poll_loop(self) -> None:
        raw = await self.ctx.store.get_kv(self._kv("offset"))
        offset = int(raw) if raw else None
        backoff = 1.0
        while not self._stopping:
            try:
                updates = await self._get_updates(offset)
            except InvalidToken as exc:
                self._error = f"telegram.token was refused: {exc}"
                log.error("telegram: %s; polling stops", self._error)
                return
            except RetryAfter as exc:
                await asyncio.sleep(retry_seconds(exc))
                continue
            except Conflict as exc:  # a webhook is set (or another poller runs)
                self._error = f"getUpdates refused: {exc}"
                log.warning("telegram: %s (deleting the webhook; again in %.0fs)", exc, backoff)
                await self._delete_webhook()
                await asyncio.sleep(backoff)  # backoff, not synchronisation
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            except (TelegramError, OSError) as exc:
                self._error = f"getUpdates failed: {exc}"
                log.warning("telegram: %s (again in %.0fs)", self._error, backoff)
                await asyncio.sleep(backoff)  # backoff, not synchronisation
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            self._error = None
            backoff = 1.0
            done, refused = await self._process_batch(updates)
            if done:
                offset = done[-1].update_id + 1
                self._save_offset(offset)
            if refused:
                return  # shutting down: the offset stays, Telegram keeps the update
            if len(done) < len(updates):
                await asyncio.sleep(backoff)  # a failed write: fetched again after a pause

    async def _get_updates(self, offset: int | None) -> Sequence[Update]:
        """One ``getUpdates`` batch. PTB builds the batch as a whole, and one update it cannot
        build (a poll from a Bot API server older than its own, say) failed the batch, every
        time it was fetched again: polling stopped for good. Such a batch is fetched again
        as JSON and built one update at a time; an update that cannot be built stands in as
        its bare id, passed by ``_well_formed`` (logged and counted), so the offset moves on.
        """
        try:
            return await self.bot.get_updates(
                offset=offset, timeout=self.settings.poll_timeout_s, allowed_updates=ALLOWED_UPDATES
            )
        except (TelegramError, OSError):
            raise
        except Exception as exc:  # a parse failure: the updates are Telegram's still
            log.warning("telegram: a polled update cannot be read (%s); reading each alone", exc)
        with warnings.catch_warnings():  # PTB's "use Bot.get_updates": this is its fallback
            warnings.simplefilter("ignore", PTBUserWarning)
            raw = await self.bot.do_api_request(
                "getUpdates",
                api_kwargs={"offset": offset, "timeout": 0, "allowed_updates": ALLOWED_UPDATES},
            )
        items = raw if isinstance(raw, list) else []
        return [
            self._built(item)
            for item in items
            if isinstance(item, dict) and type(item.get("update_id")) is int
        ]

    def _built(self, data: dict[str, Any]) -> Update:
        """The update PTB builds of ``data``, or its bare id noted as unreadable."""
        problem = guard.problem(data)
        if problem is None:
            try:
                update = Update.de_json(data, self.bot)
            except Exception as exc:  # whatever PTB raises is the input's
                problem = f"python-telegram-bot cannot read it ({exc})"
            else:
                if update is not None:
                    return update
                problem = "empty"
        self._unreadable[data["update_id"]] = problem
        return Update(update_id=data["update_id"])

    async def _process_batch(self, updates: Sequence[Update]) -> tuple[list[Update], bool]:
        """Persist one ``getUpdates`` batch; the updates done in order, and whether refused.

        Messages are handed to the core together, so their inbox writes share one commit
        (the store's group commit) instead of one disk flush each. Their order is kept:
        ``submit`` queues each write in call order before its first pause, and the tasks
        start in batch order. A button press is a barrier: the messages before it are
        persisted before it is handled, as when the batch is taken one at a time. So is a
        group's upgrade to a supergroup: the messages behind it, from the new id, are read
        once the move is noted (or they were refused by an allowlist naming the old id, or
        started a new conversation).
        The offset may pass only the leading updates that are done: after the first one
        that the store failed to take, the rest are fetched again (duplicates of the ones
        already in the inbox are dropped by their update_id). An update that could never
        be taken (one the webhook would refuse, or any other failure to handle it) is
        logged and passed, or it would stop the offset, and all behind it, for good.
        """
        self._look_ahead(updates)
        done: list[Update] = []
        i = 0
        while i < len(updates):
            j = i + 1
            if not _barrier(updates[i]):
                while j < len(updates) and not _barrier(updates[j]):
                    j += 1
            chunk = updates[i:j]
            outcomes = await asyncio.gather(
                *(self._process_polled(u) for u in chunk), return_exceptions=True
            )
            for update, outcome in zip(chunk, outcomes, strict=True):
                if isinstance(outcome, asyncio.CancelledError):
                    raise outcome
                if isinstance(outcome, RETRIED_FAILURES):
                    log.error(
                        "telegram: update %d not persisted (fetched again): %s",
                        update.update_id,
                        outcome,
                        exc_info=outcome,
                    )
                    return done, False
                if isinstance(outcome, BaseException):
                    log.error(
                        "telegram: update %d could not be handled; skipped: %s",
                        update.update_id,
                        outcome,
                        exc_info=outcome,
                    )
                    self.ctx.metrics.messages.labels("telegram", "ignored").inc()
                if outcome is SubmitStatus.REFUSED:
                    return done, True
                done.append(update)
            i = j
        return done, False

    async def _process_polled(self, update: Update) -> SubmitStatus | None:
        """``process`` for a polled update the webhook would take; None for one it refuses."""
        if not self._well_formed(update):
            return None
        return await self.process(update)

    def _well_formed(self, update: Update) -> bool:
        """The webhook's check (guard.problem) for a polled update: one it would refuse with
        a 400 (a lone surrogate no store can keep, say) is logged, counted and passed."""
        try:
            problem = self._unreadable.pop(update.update_id, None) or guard.problem(
                update.to_dict()
            )
        except Exception as exc:  # what PTB made of it cannot be read back: not an update
            problem = f"cannot be read back ({exc!r})"
        if problem is None:
            return True
        log.warning("telegram: polled update %d skipped: %s", update.update_id, problem)
        self.ctx.metrics.messages.labels("telegram", "malformed").inc()
        return False

    def _save_offset(self, offset: int) -> None:
        """Note the offset for the next start, in the background, the latest value winning.

        Telegram forgets an update when a ``getUpdates`` call passes its id, so the offset
        that matters is the one sent with the next call, and that is sent only after the
        update is in the inbox. The stored copy only spares a restart from being handed
        updates it already has: one that lags behind (a crash before it was written) costs
        nothing, since Telegram keeps no confirmed update to hand out again. So no turn
        waits for this write, and it is written at most once a second (and at stop): one
        write per batch was a disk flush that the next run's start write queued behind.
        """
        self._offset_due = offset
        if self._offset_writer is None or self._offset_writer.done():
            self._offset_writer = asyncio.create_task(self._write_offsets(), name="telegram-offset")

    async def _write_offsets(self) -> None:
        key = self._kv("offset")
        written: int | None = None
        while self._offset_due is not None and self._offset_due != written:
            value = self._offset_due
            try:
                await self.ctx.store.set_kv(key, str(value))
            except Exception as exc:  # only the restart hint; the next batch tries again
                log.warning("telegram: could not store the polling offset %d: %s", value, exc)
                return
            written = value
            with contextlib.suppress(TimeoutError):  # a pace, ended early by stop()
                await asyncio.wait_for(self._stopped.wait(), OFFSET_HINT_EVERY_S)


def _barrier(update: Update) -> bool:
    """Whether ``update`` is handled alone in a polled batch (see ``_process_batch``)."""
    message = update.message
    return update.callback_query is not None or (
        message is not None and bool(message.migrate_to_chat_id or message.migrate_from_chat_id)
    )


def _toast(markdown: str) -> str:
    """A press's answer (Markdown, as the core's messages are) as the plain text a toast
    shows: what the message would read (``Approved `bash` `` without its backticks)."""
    if not markdown:
        return ""
    try:
        plain = convert.first_part(markdown).text.strip()
    except Exception:  # a toast is a courtesy: the raw text rather than none
        plain = markdown
    return plain[:MAX_TOAST]
