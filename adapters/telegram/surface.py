"""The Telegram surface: the core's replies as Bot API calls, within Telegram's limits.

Flood control: at most about one message a second per chat, ``RetryAfter`` honoured (the
core retries after it), and after a 429 a bot-wide cooldown (:mod:`.calls` paces every
call and keeps the cooldown) during which typing is dropped and edits are held: only the
newest edit of each message is kept (intermediate progress is replaced, never sent) and one
tracked task sends it once the cooldown is over, so a bubble still ends on the run's
summary (the Slack surface does the same for its 429s). Answers are never dropped, they are
retried once the cooldown is over. A reply in several parts remembers the parts already
sent, so a retry never sends one twice.

Delivery is at least once, not exactly once: the Bot API has no way to look a sent message
up, so this surface does not offer ``find_sent``. A ``sendMessage`` that Telegram carried
out but whose answer never arrived (a timeout, a reset connection, a 5xx after the work),
or a gateway killed between Telegram's answer and the store marking the reply sent, is
sent again: one extra copy per such event, never a lost answer (tests/faults measure it).
A progress bubble is not sent again after such a failure (the core's reporter gives it up):
its copy, if it landed, is an orphan whose id the gateway never learnt, and a press on its
Stop once the run is over turns it into "the run has ended", without buttons.

A basic group upgraded to a supergroup (an admin turns on topics, a public link, ...) gets
a new chat id, and every call to the old one is refused with ``migrate_to_chat_id`` (PTB's
``ChatMigrated``). Telegram says where the chat went, so the call is made once more there,
and the move is remembered (:mod:`.calls`): the thread's later replies and edits go to the
new id. Files, both ways, are :mod:`.files`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from typing import Any

from telegram import (
    Bot,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
)
from telegram.constants import ChatAction
from telegram.error import BadRequest, TelegramError

from bridge.model import Attachment, Choice, Outgoing, ReplyKind, ReplyTarget
from bridge.ports import Capabilities, DeliveryError

from .api import BotApi
from .calls import BotCalls
from .files import TelegramFiles, file_refused, refused_note
from .render import MAX_MESSAGE, Part, first_part, render, utf16_len

log = logging.getLogger(__name__)

MAX_CALLBACK_DATA = 64  # bytes
MAX_PARTIAL = 1000  # replies whose parts are remembered across retries
NO_PREVIEW = {"is_disabled": True}  # link_preview_options: an answer's links stay links


def _entity_error(exc: BadRequest) -> bool:
    """Telegram refused the formatting, not the message: "can't parse entities", "entities
    too long" (their total size is capped: a link-heavy message), ENTITY_BOUNDS_INVALID..."""
    return "entit" in str(exc).lower()


def whole(message: Outgoing) -> Outgoing:
    """``message`` with any half of a surrogate pair as U+FFFD: a runner's JSON may carry one
    (an answer cut between the halves of an emoji), and no part of the Bot API's path can
    encode it (it raised out of the delivery, and the answer was never sent)."""
    if _encodes(message.text) and all(_encodes(c.label) for c in message.choices):
        return message
    choices = tuple(dataclasses.replace(c, label=_mended(c.label)) for c in message.choices)
    return dataclasses.replace(message, text=_mended(message.text), choices=choices)


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _mended(text: str) -> str:
    """Pairs of halves joined, a lone half replaced by U+FFFD."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def keyboard(choices: tuple[Choice, ...]) -> InlineKeyboardMarkup | None:
    if not choices:
        return None
    buttons = []
    for c in choices:
        if len(c.token.encode()) > MAX_CALLBACK_DATA:  # Telegram would refuse the message
            raise DeliveryError(
                f"a button's token is {len(c.token.encode())} bytes; Telegram's callback_data "
                f"takes at most {MAX_CALLBACK_DATA}",
                permanent=True,
            )
        buttons.append(InlineKeyboardButton(c.label, callback_data=c.token))
    rows = [buttons[i : i + 2] for i in range(0, len(buttons), 2)]
    return InlineKeyboardMarkup(rows)


def parse_ref(ref: str) -> tuple[int, int]:
    chat, _, message = ref.rpartition(":")
    return int(chat), int(message)


def where(target: ReplyTarget) -> tuple[int, int | None]:
    """The chat and forum topic a reply goes to."""
    ctx = target.context
    chat = ctx.get("chat_id")
    if chat is None:  # telegram:<chat>[:<topic>]
        pieces = target.thread_key.split(":")
        chat = pieces[1]
        thread = int(pieces[2]) if len(pieces) > 2 else None
        return int(chat), thread
    thread = ctx.get("thread_id")
    return int(chat), int(thread) if thread is not None else None


class TelegramSurface:
    name = "telegram"
    # Parts are converted to entities after the core's split (in Telegram's own unit):
    # leave headroom under 4096 for what the conversion adds.
    capabilities = Capabilities(
        edit=True,
        buttons=True,
        upload=True,
        typing=True,
        max_length=3500,
        length_unit="utf16",
        edit_interval_s=2.0,
    )

    def __init__(self, bot: Bot, *, min_interval_s: float = 1.0, api: BotApi | None = None) -> None:
        self.bot = bot
        # sends and edits whose answer is read as JSON (:mod:`.api`)
        self.api = api or BotApi(bot)
        self.calls = BotCalls(min_interval_s)  # pacing, the cooldown, the chats' current ids
        self.files = TelegramFiles(bot, self.calls)
        self._partial: dict[str, dict[int, int]] = {}  # reply key -> part -> message id
        self._held_edits: dict[tuple[int, int], Outgoing] = {}  # message -> newest held edit
        self._flusher: asyncio.Task[None] | None = None

    # -- flood control (:mod:`.calls`) ----------------------------------------------------------

    @property
    def min_interval_s(self) -> float:
        return self.calls.min_interval_s

    @min_interval_s.setter
    def min_interval_s(self, value: float) -> None:
        self.calls.min_interval_s = value

    @property
    def cooldown_until(self) -> float:
        """Monotonic: the bot-wide pause after a 429."""
        return self.calls.cooldown_until

    @cooldown_until.setter
    def cooldown_until(self, value: float) -> None:
        self.calls.cooldown_until = value

    def cooling_down(self) -> float:
        return self.calls.cooling_down()

    def current_chat(self, chat: int) -> int:
        """The chat's id now: a group's supergroup id once Telegram has told of the upgrade."""
        return self.calls.current_chat(chat)

    # -- edits held during the cooldown ---------------------------------------------------------

    def _hold(self, key: tuple[int, int], message: Outgoing) -> None:
        """Keep ``message`` as the newest edit of ``key``, sent once the cooldown is over."""
        self._held_edits[key] = message
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_edits(), name="telegram-edits")

    async def _flush_edits(self) -> None:
        """Send the newest held edit of each message once the bot-wide cooldown is over."""
        while self._held_edits:
            wait = self.cooling_down()
            if wait > 0:
                await asyncio.sleep(wait)  # waiting out retry_after, not synchronisation
                continue
            key, message = next(iter(self._held_edits.items()))
            try:
                await self._edit(key, message, held=True)
            except DeliveryError as exc:  # a 429 holds it again (in _edit); others drop it
                if not exc.retry_after:
                    self._drop_held(key, message, str(exc))
            except Exception as exc:  # whatever it is, never loop on it
                self._drop_held(key, message, repr(exc))

    def _drop_held(self, key: tuple[int, int], message: Outgoing, why: str) -> None:
        if self._held_edits.get(key) is message:
            del self._held_edits[key]
        log.info("telegram: held edit of message %s dropped: %s", key, why)

    async def close(self) -> None:
        """Give held edits a moment to go out (the cooldown may be over), then stop trying."""
        if self._flusher is None:
            return
        if not self._flusher.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._flusher), timeout=1)
        self._flusher.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._flusher
        self._flusher = None
        if self._held_edits:
            log.info("telegram: %d held edits not sent at shutdown", len(self._held_edits))
            self._held_edits.clear()

    # -- the surface ---------------------------------------------------------------------------

    async def send(self, target: ReplyTarget, message: Outgoing, *, reply_key: str) -> str:
        message = whole(message)
        chat, thread = where(target)
        chat = self.current_chat(chat)
        self.calls.check_cooldown()
        parts = render(message.text)
        markup = keyboard(message.choices)
        reply_to = target.context.get("message_id")
        quote = (
            bool(target.context.get("shared"))
            and message.kind in (ReplyKind.ANSWER, ReplyKind.ERROR)
            and not message.continues  # the question quoted above the first part only
        )
        done = self._partial.setdefault(reply_key, {})
        last_id = 0
        for i, part in enumerate(parts):
            if i in done:
                last_id = done[i]
                continue
            plain = (
                message.text
                if len(parts) == 1 and utf16_len(message.text) <= MAX_MESSAGE
                else part.text
            )
            async with self.calls.paced(chat):
                self.calls.check_cooldown()
                last_id = await self._send_text(
                    chat,
                    thread,
                    part,
                    plain,
                    markup=markup if i == len(parts) - 1 else None,
                    reply_to=reply_to if quote and i == 0 and isinstance(reply_to, int) else None,
                )
            done[i] = last_id
        self._partial.pop(reply_key, None)
        while len(self._partial) > MAX_PARTIAL:
            self._partial.pop(next(iter(self._partial)))
        return f"{self.current_chat(chat)}:{last_id}"

    async def _send_text(
        self,
        chat: int,
        thread: int | None,
        part: Part,
        plain: str,
        *,
        markup: InlineKeyboardMarkup | None,
        reply_to: int | None,
    ) -> int:
        params: dict[str, Any] = {
            "message_thread_id": thread,
            "reply_markup": markup,
            "link_preview_options": NO_PREVIEW,
        }
        if reply_to is not None:
            params["reply_parameters"] = {
                "message_id": reply_to,
                "allow_sending_without_reply": True,
            }
        try:
            return await self.calls.in_chat(
                chat,
                lambda c: self.api.message_id(
                    "sendMessage",
                    {"chat_id": c, "text": part.text, "entities": part.entities or None, **params},
                ),
            )
        except BadRequest as exc:
            if not (part.entities and _entity_error(exc)):
                raise self.calls.map(exc) from exc
            log.warning("Telegram refused the formatting (%s); resending as plain text", exc)
            try:
                return await self.calls.in_chat(
                    chat,
                    lambda c: self.api.message_id(
                        "sendMessage", {"chat_id": c, "text": plain, **params}
                    ),
                )
            except TelegramError as exc2:
                raise self.calls.map(exc2) from exc2
        except TelegramError as exc:
            raise self.calls.map(exc) from exc

    async def edit(self, target: ReplyTarget, ref: str, message: Outgoing) -> None:
        await self.edit_message(*parse_ref(ref), message)

    async def edit_message(self, chat: int, message_id: int, message: Outgoing) -> None:
        """Edit now, or during the bot-wide cooldown keep it as that message's newest edit
        (sent once the cooldown is over). A 429 on the edit itself holds it too, and raises."""
        message = whole(message)
        chat = self.current_chat(chat)
        if self.cooling_down() > 0:
            self._hold((chat, message_id), message)
            return
        self._held_edits.pop((chat, message_id), None)  # this newer edit replaces a held one
        await self._edit((chat, message_id), message)

    async def _edit(self, key: tuple[int, int], message: Outgoing, *, held: bool = False) -> None:
        chat, message_id = key
        part = first_part(message.text)
        markup = keyboard(message.choices)
        async with self.calls.paced(chat):
            if held and self._held_edits.get(key) is not message:
                return  # a newer edit replaced it (held) or already went out
            if self.cooling_down() > 0:
                self._hold(key, message)
                return
            self._held_edits.pop(key, None)  # this edit replaces any held one
            try:
                await self._edit_call(chat, message_id, part, markup)
            except DeliveryError as exc:
                if exc.retry_after and key not in self._held_edits:
                    self._hold(key, message)
                raise

    async def _edit_call(
        self, chat: int, message_id: int, part: Part, markup: InlineKeyboardMarkup | None
    ) -> None:
        try:
            await self.calls.in_chat(
                chat,
                lambda c: self.api.call(
                    "editMessageText",
                    {
                        "chat_id": c,
                        "message_id": message_id,
                        "text": part.text,
                        "entities": part.entities or None,
                        "reply_markup": markup,
                        "link_preview_options": NO_PREVIEW,
                    },
                ),
            )
        except BadRequest as exc:
            if "not modified" in str(exc).lower():
                return
            if not (part.entities and _entity_error(exc)):
                raise self.calls.map(exc) from exc
            try:
                await self.calls.in_chat(
                    chat,
                    lambda c: self.api.call(
                        "editMessageText",
                        {
                            "chat_id": c,
                            "message_id": message_id,
                            "text": part.text,
                            "reply_markup": markup,
                        },
                    ),
                )
            except TelegramError as exc2:
                raise self.calls.map(exc2) from exc2
        except TelegramError as exc:
            raise self.calls.map(exc) from exc

    async def settle_message(self, chat: int, message_id: int, message: Outgoing) -> None:
        """Edit a message a button press found stale (its run is over), unless an edit of it
        is held for the cooldown: that one is newer (the run's summary) and drops the
        buttons itself, so it is not replaced."""
        if (self.current_chat(chat), message_id) in self._held_edits:
            return
        await self.edit_message(chat, message_id, message)

    async def remove_keyboard(self, chat: int, message_id: int) -> None:
        try:
            await self.calls.in_chat(
                chat,
                lambda c: self.bot.edit_message_reply_markup(
                    chat_id=c, message_id=message_id, reply_markup=None
                ),
            )
        except TelegramError as exc:
            if not isinstance(exc, BadRequest):
                raise self.calls.map(exc) from exc

    async def upload(
        self,
        target: ReplyTarget,
        name: str,
        data: bytes,
        media_type: str | None,
        *,
        reply_key: str,
    ) -> str:
        """Send a file; one Telegram will not take is named in a note sent in its place."""
        chat, thread = where(target)
        chat = self.current_chat(chat)
        self.calls.check_cooldown()
        try:
            async with self.calls.paced(chat):
                self.calls.check_cooldown()
                message_id = await self.files.send(chat, thread, name, data, media_type)
        except TelegramError as exc:
            why = file_refused(exc)
            if why is None:
                raise self.calls.map(exc) from exc
            log.warning("telegram: %s (%d bytes) refused: %s; a note says so", name, len(data), exc)
            note = Outgoing(ReplyKind.NOTICE, refused_note(name, len(data), why))
            return await self.send(target, note, reply_key=reply_key)
        return f"{self.current_chat(chat)}:{message_id}"

    async def typing(self, target: ReplyTarget) -> None:
        if self.cooling_down() > 0:
            return
        chat, thread = where(target)
        try:
            await self.calls.in_chat(
                chat,
                lambda c: self.bot.send_chat_action(
                    chat_id=c, action=ChatAction.TYPING, message_thread_id=thread
                ),
            )
        except TelegramError as exc:
            raise self.calls.map(exc) from exc

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        return await self.files.download(attachment, max_bytes)
