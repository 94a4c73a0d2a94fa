"""How the Telegram surface makes a Bot API call: paced per chat, held back during the
bot-wide cooldown after a 429, made in a group's new id once it became a supergroup, and
its failure told to the core as a :class:`~bridge.ports.DeliveryError`.

Flood control: at most about one message a second per chat (a lock and a timestamp per
chat; a group is paced three times slower), and ``RetryAfter`` starts a bot-wide cooldown
(the core retries after it). A basic group upgraded to a supergroup gets a new chat id and
every call to the old one is refused with ``migrate_to_chat_id`` (PTB's ``ChatMigrated``):
the call is made once more there, and the move is remembered.

Its own module so :class:`~.surface.TelegramSurface` (what a reply becomes: messages,
edits, files) stays one readable class; it holds one :class:`BotCalls` and makes every
call through it.
"""

from __future__ import annotations

import asyncio
import datetime as dtm
import logging
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from telegram.error import (
    BadRequest,
    ChatMigrated,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
)
from telegram.warnings import PTBDeprecationWarning

from bridge.ports import ChatGone, DeliveryError

log = logging.getLogger(__name__)

GROUP_PACE_FACTOR = 3  # a group chat (id < 0) is paced 3x a private one: ~20 a minute
MAX_MIGRATED = 10_000  # groups remembered as upgraded to a supergroup (old id -> new id)
GONE_CHAT = "chat not found"  # a 400's description: the chat (or group) was deleted

T = TypeVar("T")


def retry_seconds(exc: RetryAfter) -> float:
    with warnings.catch_warnings():  # PTB 22 warns that the type becomes timedelta
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value: Any = exc.retry_after
    if isinstance(value, dtm.timedelta):
        return max(value.total_seconds(), 0.0)
    return max(float(value), 0.0)


class BotCalls:
    """The pacing, the cooldown and the chats' current ids, shared by every call."""

    def __init__(self, min_interval_s: float) -> None:
        self.min_interval_s = min_interval_s
        self.cooldown_until = 0.0  # monotonic: the bot-wide pause after a 429
        self._locks: dict[int, asyncio.Lock] = {}
        self._last_sent: dict[int, float] = {}
        self._migrated: dict[int, int] = {}  # a group upgraded to a supergroup: old -> new id

    # -- flood control ------------------------------------------------------------------------

    def cooling_down(self) -> float:
        return max(self.cooldown_until - time.monotonic(), 0.0)

    def check_cooldown(self) -> None:
        left = self.cooling_down()
        if left > 0:
            raise DeliveryError(
                f"Telegram flood control: waiting {left:.1f}s more", retry_after=left
            )

    @asynccontextmanager
    async def paced(self, chat: int) -> AsyncIterator[None]:
        lock = self._locks.setdefault(chat, asyncio.Lock())
        async with lock:
            # a group allows ~20 messages a minute (sends and edits alike), a private chat ~1/s
            interval = self.min_interval_s * (GROUP_PACE_FACTOR if chat < 0 else 1)
            wait = self._last_sent.get(chat, 0.0) + interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)  # rate limiting, not synchronisation
            try:
                yield
            finally:
                self._last_sent[chat] = time.monotonic()
                if len(self._last_sent) > 5000:
                    self._prune()

    def _prune(self) -> None:
        old = time.monotonic() - 60
        for chat in [c for c, t in self._last_sent.items() if t < old]:
            lock = self._locks.get(chat)
            if lock is None or not lock.locked():
                self._last_sent.pop(chat, None)
                self._locks.pop(chat, None)

    def map(self, exc: TelegramError) -> DeliveryError:
        """``exc`` as the core's error; a 429 starts the bot-wide cooldown."""
        if isinstance(exc, RetryAfter):
            seconds = retry_seconds(exc)
            self.cooldown_until = max(self.cooldown_until, time.monotonic() + seconds)
            return DeliveryError(
                f"Telegram flood control: retry in {seconds:g}s", retry_after=seconds
            )
        if isinstance(exc, Forbidden) or (
            isinstance(exc, BadRequest) and GONE_CHAT in exc.message.lower()
        ):  # 403: the bot was blocked, removed from the group; 400: the chat was deleted
            return ChatGone(f"Telegram refused: {exc}")
        if isinstance(exc, InvalidToken | ChatMigrated | BadRequest):
            return DeliveryError(f"Telegram refused: {exc}", permanent=True)
        if isinstance(exc, NetworkError):
            return DeliveryError(f"Telegram unreachable: {exc}")
        return DeliveryError(f"Telegram error: {exc}")

    # -- a group upgraded to a supergroup ---------------------------------------------------

    def current_chat(self, chat: int) -> int:
        """The chat's id now: a group's supergroup id once Telegram has told of the upgrade."""
        return self._migrated.get(chat, chat)

    def _remember_migration(self, old: int, new: int) -> int:
        if self._migrated.get(old) != new:
            log.info("telegram: group %d is now supergroup %d; its replies go there", old, new)
        self._migrated.pop(old, None)  # the newest move is the last one evicted
        self._migrated[old] = new
        while len(self._migrated) > MAX_MIGRATED:
            self._migrated.pop(next(iter(self._migrated)))
        return new

    async def in_chat(self, chat: int, call: Callable[[int], Awaitable[T]]) -> T:
        """``call`` in the chat's current id; once more in the supergroup if Telegram says the
        group was upgraded (a second ChatMigrated is raised to the caller, mapped as refused)."""
        chat = self.current_chat(chat)
        try:
            return await call(chat)
        except ChatMigrated as exc:
            return await call(self._remember_migration(chat, int(exc.new_chat_id)))
