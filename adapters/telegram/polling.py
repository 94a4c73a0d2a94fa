"""Telegram by long polling: ``getUpdates`` driven by the adapter in one tracked task.

The Application is built without PTB's own updater, so this loop owns the offset: it moves
on past an update only once the update is persisted (``submit`` returned), and a batch is
handed to the core together so its inbox writes share one commit. The offset is also
stored, as a hint for the next start. A webhook still set would refuse ``getUpdates``
(409): it is deleted at start and again at each refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from telegram import Bot
from telegram.error import Conflict, InvalidToken, RetryAfter, TelegramError
from telegram.request import BaseRequest

from bridge.ports import AdapterContext, SubmitStatus
from bridge.store import StoreError

from . import buildable, guard
from .api import BotApi
from .calls import retry_seconds
from .intake import ALLOWED_UPDATES
from .update_json import Update

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 30.0  # between failed getUpdates calls
OFFSET_HINT_EVERY_S = 1.0  # the stored polling offset (a restart hint) at most once a second
# what holds the polling offset back: a write that may succeed when the update is fetched again
RETRIED_FAILURES: tuple[type[BaseException], ...] = (StoreError, OSError)


class Polling:
    """The poll loop, its batches, and the offset it stores."""

    def __init__(
        self,
        ctx: AdapterContext,
        bot: Bot,
        api: BotApi,
        updates_request: BaseRequest,
        *,
        offset_key: str,
        stopped: asyncio.Event,
        process: Callable[[Update], Awaitable[SubmitStatus | None]],
        look_ahead: Callable[[Sequence[Update]], None],
    ) -> None:
        self.ctx = ctx
        self._bot = bot
        self._api = api  # getUpdates, answered as JSON
        self._updates_request = updates_request  # its connection: the read timeout's base
        self._offset_key = offset_key  # the store's kv key of the offset
        self._stopped = stopped  # set by the adapter's stop
        self._process = process
        self._look_ahead = look_ahead  # the intake's: albums addressed in a batch
        self._poller: asyncio.Task[None] | None = None
        self._offset_writer: asyncio.Task[None] | None = None
        self._offset_due: int | None = None
        self._unreadable: dict[int, str] = {}  # polled updates refused or unbuilt (_built)
        self.error: str | None = None  # what stopped or holds up polling, for /healthz

    def start(self) -> None:
        self._poller = asyncio.create_task(self._poll(), name="telegram-polling")

    async def stop(self) -> None:
        """End the loop (the adapter's stop ended its pauses), then store the last offset."""
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._poller
            self._poller = None
        if self._offset_writer is not None:  # the last offset is stored before the store closes
            with contextlib.suppress(Exception):
                await self._offset_writer
            self._offset_writer = None

    def health(self) -> str | None:
        if self._poller is not None and self._poller.done() and not self._stopped.is_set():
            return self.error or "telegram polling stopped"
        return self.error

    async def delete_webhook(self) -> None:
        """getUpdates is refused (409 Conflict) while a webhook is set: remove it."""
        try:
            await self._bot.delete_webhook()
        except (TelegramError, OSError) as exc:
            log.warning(
                "telegram: deleteWebhook failed (tried again if getUpdates is refused): %s", exc
            )

    async def _poll(self) -> None:
        try:
            await self._poll_loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.error = f"telegram polling failed: {exc}"
            log.exception("telegram: polling stopped")

    async def _poll_loop(self) -> None:
        raw = await self.ctx.store.get_kv(self._offset_key)
        offset = int(raw) if raw else None
        backoff = 1.0
        while not self._stopped.is_set():
            try:
                updates = await self._get_updates(offset)
            except InvalidToken as exc:
                self.error = f"telegram.token was refused: {exc}"
                log.error("telegram: %s; polling stops", self.error)
                return
            except RetryAfter as exc:
                await asyncio.sleep(retry_seconds(exc))
                continue
            except Conflict as exc:  # a webhook is set (or another poller runs)
                self.error = f"getUpdates refused: {exc}"
                log.warning("telegram: %s (deleting the webhook; again in %.0fs)", exc, backoff)
                await self.delete_webhook()
                await asyncio.sleep(backoff)  # backoff, not synchronisation
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            except (TelegramError, OSError) as exc:
                self.error = f"getUpdates failed: {exc}"
                log.warning("telegram: %s (again in %.0fs)", self.error, backoff)
                await asyncio.sleep(backoff)  # backoff, not synchronisation
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            self.error = None
            backoff = 1.0
            done, refused = await self._process_batch(updates)
            if done:
                offset = done[-1]["update_id"] + 1
                self._save_offset(offset)
            if refused:
                return  # shutting down: the offset stays, Telegram keeps the update
            if len(done) < len(updates):
                await asyncio.sleep(backoff)  # a failed write: fetched again after a pause

    async def _get_updates(self, offset: int | None) -> Sequence[Update]:
        """One ``getUpdates`` batch, read as JSON and checked one update at a time.

        Each update is checked as the webhook checks its body (:func:`guard.problem`,
        :func:`buildable.read`) and read as JSON (:mod:`.update_json`; :mod:`.api` says why
        not through ``Bot.get_updates``). Built by PTB as a whole batch, one update PTB
        cannot build (a poll from a Bot API server newer than PTB, say) failed the batch
        every time it was fetched again: polling stopped for good. An update that cannot be
        read stands in as its bare id, passed by ``_well_formed`` (logged and counted), so
        the offset moves on.
        """
        timeout = self.ctx.settings.poll_timeout_s
        read_timeout = (self._updates_request.read_timeout or 0) + timeout
        raw = await self._api.call(
            "getUpdates",
            {"offset": offset, "timeout": timeout, "allowed_updates": ALLOWED_UPDATES},
            read_timeout=read_timeout,
        )
        items = raw if isinstance(raw, list) else []
        return [
            self._built(item)
            for item in items
            if isinstance(item, dict) and type(item.get("update_id")) is int
        ]

    def _built(self, data: dict[str, Any]) -> Update:
        """The update as the adapter reads it (:func:`buildable.read`), or its bare id noted
        as unreadable."""
        problem = guard.problem(data)
        if problem is None:
            try:
                return buildable.read(data, self._bot)
            except buildable.Unreadable as exc:
                problem = f"python-telegram-bot cannot read it ({exc})"
        self._unreadable[data["update_id"]] = problem
        return {"update_id": data["update_id"]}

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
                        update["update_id"],
                        outcome,
                        exc_info=outcome,
                    )
                    return done, False
                if isinstance(outcome, BaseException):
                    log.error(
                        "telegram: update %d could not be handled; skipped: %s",
                        update["update_id"],
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
        return await self._process(update)

    def _well_formed(self, update: Update) -> bool:
        """The webhook's check (guard.problem) for a polled update: one it would refuse with
        a 400 (a lone surrogate no store can keep, say) is logged, counted and passed."""
        problem = self._unreadable.pop(update["update_id"], None)  # noted by _built
        if problem is None:
            return True
        log.warning("telegram: polled update %d skipped: %s", update["update_id"], problem)
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
        key = self._offset_key
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
    message = update.get("message")
    return update.get("callback_query") is not None or (
        message is not None
        and bool(message.get("migrate_to_chat_id") or message.get("migrate_from_chat_id"))
    )
