"""Telegram's updates to the core: a message becomes an :class:`~bridge.model.Inbound`
handed to ``gateway.submit``, whichever way it came (the webhook or polling).

The conversion is :mod:`.inbound`'s (a pure function of the message, read as JSON, and
the bot's rules);
this is what it needs around it that lasts from one update to the next: the chats that
moved to a supergroup (:mod:`.moves`), the albums a part of which addressed the bot, and
the word to a sender whose message the core does not take. Button presses are
:mod:`.presses`'s.
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import Sequence

from bridge.model import Inbound, Outgoing, ReplyKind, ReplyTarget
from bridge.ports import AdapterContext, DeliveryError, SubmitStatus

from .beside import Beside
from .inbound import SHARED_CHAT_TYPES, Ignored, Rules, thread_key, to_inbound
from .moves import ChatMoves
from .surface import TelegramSurface
from .update_json import Message, Update

log = logging.getLogger(__name__)

# the updates the intake takes, asked of Telegram by setWebhook and getUpdates alike
ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]
# albums one part of which addressed the bot in a group, remembered so their other parts
# (uncaptioned: no mention) are let in; an album's parts come within a second of each other
ALBUMS_KEPT = 1024


class UpdateIntake:
    """Messages to the core, with the bot's rules and the chats' moves."""

    def __init__(
        self,
        ctx: AdapterContext,
        surface: TelegramSurface,
        rules: Rules,
        moves: ChatMoves,
        beside: Beside,
    ) -> None:
        self.ctx = ctx
        self.rules = rules
        self.moves = moves  # groups upgraded to supergroups (moves.py)
        self._surface = surface
        self._beside = beside
        self._addressed_albums: OrderedDict[str, None] = OrderedDict()  # see ALBUMS_KEPT

    async def take(self, update: Update) -> SubmitStatus | None:
        """Hand one update that is not a press to the core; returns only after it is
        persisted (or dropped)."""
        metrics = self.ctx.metrics.messages
        update_id = update["update_id"]
        message = update.get("message")
        if message is None:
            kind = "edited message" if update.get("edited_message") is not None else "update"
            log.debug("telegram: %s %d ignored", kind, update_id)
            metrics.labels("telegram", "ignored").inc()
            return None
        if message.get("migrate_to_chat_id") or message.get("migrate_from_chat_id"):
            await self._note_move(message)
            metrics.labels("telegram", "ignored").inc()
            return None
        try:
            result = to_inbound(
                update_id,
                message,
                self.rules,
                self._addressed_albums.keys(),
                keyed_on=self.keyed_on(message["chat"]["id"]),
            )
        except Exception:
            log.exception("telegram: update %d could not be read; dropped", update_id)
            metrics.labels("telegram", "ignored").inc()
            return None
        if isinstance(result, Ignored):
            log.info("telegram: update %d %s: %s", update_id, result.outcome, result.reason)
            metrics.labels("telegram", result.outcome).inc()
            if result.tell is not None:
                self._beside.run(self._tell(update_id, result), f"telegram-tell-{update_id}")
            return None
        if result.part_of is not None:  # its other parts are let in too (see to_inbound)
            self._addressed(result.part_of)
        submitted = await self.ctx.gateway.submit(result)
        return submitted.status

    def keyed_on(self, chat_id: int) -> int:
        """The chat id a chat's conversations are keyed on (moves.py)."""
        return self.moves.keyed_on(chat_id)

    async def _note_move(self, message: Message) -> None:
        """A group became a supergroup: its conversations follow it (moves.py)."""
        chat_id = message["chat"]["id"]
        if new := message.get("migrate_to_chat_id"):  # posted in the old chat
            await self.moves.note(chat_id, int(new))
        elif old := message.get("migrate_from_chat_id"):  # posted in the new one
            await self.moves.note(int(old), chat_id)

    def _addressed(self, album: str) -> None:
        """Remember an album one part of which addressed the bot (see ALBUMS_KEPT)."""
        self._addressed_albums[album] = None
        self._addressed_albums.move_to_end(album)
        while len(self._addressed_albums) > ALBUMS_KEPT:
            self._addressed_albums.popitem(last=False)

    def look_ahead(self, updates: Sequence[Update]) -> None:
        """Note the albums of a polled batch that one of their parts addresses to the bot.

        In a group only the part with the caption mentions the bot, and a client may put
        the caption on any part, not only the first: taken in order, the parts before it
        would be ignored. A batch usually holds a whole album, so its addressed albums are
        known before any of its parts is taken. (A webhook gets the parts one request at a
        time: there a part before the captioned one is still ignored.)
        """
        for update in updates:
            message = update.get("message")
            if message is None or message.get("media_group_id") is None:
                continue
            chat = message["chat"]
            if chat["type"] not in SHARED_CHAT_TYPES:
                continue
            with contextlib.suppress(Exception):  # take() logs it when it meets the update
                result = to_inbound(
                    update["update_id"], message, self.rules, keyed_on=self.keyed_on(chat["id"])
                )
                if isinstance(result, Inbound) and result.part_of is not None:
                    self._addressed(result.part_of)

    async def _tell(self, update_id: int, ignored: Ignored) -> None:
        """Say why a message the core does not take gets no answer, quoting it in a group
        (an error, as a refused run is said). Best effort: not stored, not retried."""
        assert ignored.tell is not None and ignored.target is not None
        chat, topic = int(ignored.target["chat_id"]), ignored.target.get("thread_id")
        target = ReplyTarget(
            surface="telegram",
            thread_key=thread_key(chat, int(topic) if topic is not None else None),
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
