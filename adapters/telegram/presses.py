"""Telegram's button presses (callback queries): resolved in the core, answered, settled.

Every callback query is answered (or its button spins); the answer is the toast or alert
that :func:`bridge.presses.press_plan` says, in plain text. The pressed message is then
edited to how the press left it: before the webhook's 200, or beside the core when the
press came in a polled batch (the batch's other chats must not wait for the edit).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from telegram import Bot
from telegram.error import TelegramError

from bridge.ports import AdapterContext, DeliveryError
from bridge.presses import (
    NOT_ALLOWED_TEXT,
    PRESS_FAILED_TEXT,
    MessageChange,
    PressPlan,
    press_plan,
)

from .beside import Beside
from .inbound import Rules, display_name
from .render import first_part
from .surface import TelegramSurface
from .update_json import CallbackQuery, Message

log = logging.getLogger(__name__)

MAX_TOAST = 200  # answerCallbackQuery's text limit


class CallbackPresses:
    """Callback queries to the core, their answers, and the pressed messages' edits."""

    def __init__(
        self,
        ctx: AdapterContext,
        bot: Bot,
        surface: TelegramSurface,
        rules: Rules,
        keyed_on: Callable[[int], int],
        *,
        polled: bool,
        beside: Beside,
    ) -> None:
        self.ctx = ctx
        self.rules = rules
        self._bot = bot
        self._surface = surface
        self._keyed_on = keyed_on  # the chat id its conversations are keyed on (moves.py)
        self._polled = polled
        self._beside = beside

    async def on_callback(self, query: CallbackQuery) -> None:
        """Handle a press, answer its query, then edit the pressed message.

        The answer goes first: the button spins until it arrives, and the edit waits for
        the chat's pace (seconds in a group) and may be slow or fail; neither delays it.
        A polled press's edit goes on in the background: the rest of its batch, every
        chat's messages, waited for it (up to the client's timeout on a slow Telegram).
        """
        query_id, user = query["id"], query["from"]
        message = query.get("message")
        chat = message["chat"] if message is not None else None
        text, alert = "", False
        pressed: tuple[Message, PressPlan] | None = None
        try:
            if not self.rules.user_allowed(
                user,
                chat["id"] if chat else None,
                chat.get("username") if chat else None,
                self._keyed_on(chat["id"]) if chat else None,
            ):
                self.ctx.metrics.messages.labels("telegram", "denied").inc()
                text, alert = NOT_ALLOWED_TEXT, True
            elif data := query.get("data"):
                result = await self.ctx.gateway.press(
                    data,
                    str(user["id"]),
                    is_operator=self.rules.is_operator(user),
                    actor_name=display_name(user),
                )
                plan = press_plan(data, result)
                text, alert = plan.text, plan.refused  # always answered: the button spins
                if message is not None:
                    pressed = (message, plan)
        except Exception:
            log.exception("telegram: callback query %s failed", query_id)
            text, alert = PRESS_FAILED_TEXT, True
        finally:
            try:  # every callback query is answered, or the button spins
                await self._bot.answer_callback_query(
                    query_id, text=_toast(text) or None, show_alert=alert
                )
            except TelegramError as exc:
                log.info("telegram: answerCallbackQuery failed: %s", exc)
        if pressed is None:
            return
        settle = self._settle_press(query_id, *pressed)
        if not self._polled:
            await settle  # only this update's 200 waits for it
            return
        # polled, the batch behind the press (every chat's messages) would wait for the edit
        self._beside.run(settle, f"telegram-settle-{query_id}")

    async def _settle_press(self, query_id: str, message: Message, plan: PressPlan) -> None:
        try:
            await self._settle(message, plan)
        except Exception:  # the press is handled and answered; only its message is stale
            log.exception("telegram: could not update the message of press %s", query_id)

    async def _settle(self, message: Message, plan: PressPlan) -> None:
        """The pressed message as the press left it (:func:`bridge.presses.press_plan`)."""
        chat, message_id = message["chat"]["id"], message["message_id"]
        try:
            if plan.change is MessageChange.EDIT and plan.resolved is not None:
                await self._surface.edit_message(chat, message_id, plan.resolved)
            elif plan.change is MessageChange.SETTLE and plan.resolved is not None:
                await self._surface.settle_message(chat, message_id, plan.resolved)
            elif plan.change is MessageChange.DROP_BUTTONS:
                await self._surface.remove_keyboard(chat, message_id)
        except DeliveryError as exc:
            log.info("telegram: could not update the prompt message: %s", exc)


def _toast(markdown: str) -> str:
    """A press's answer (Markdown, as the core's messages are) as the plain text a toast
    shows: what the message would read (``Approved `bash` `` without its backticks)."""
    if not markdown:
        return ""
    try:
        plain = first_part(markdown).text.strip()
    except Exception:  # a toast is a courtesy: the raw text rather than none
        plain = markdown
    return plain[:MAX_TOAST]
