"""Bot API calls whose answer the gateway reads only one field of, made without building it.

Why: python-telegram-bot's ``Bot.send_message`` (and ``edit_message_text``,
``get_updates``) turns Telegram's JSON answer into a full ``Message`` or ``Update`` object
graph, attribute by attribute through ``TelegramObject.__setattr__``. The gateway reads one
field of a sent message (its ``message_id``) and nothing of an edit's, and a polled update
it reads as JSON (:mod:`.update_json`). Profiling
``bench/bench_telegram_load.py`` put ``Message.de_json`` alone at 12% of the gateway's busy
time, more than its SQLite work, and ``Update.to_dict`` (the JSON read back from what PTB
built) at 2.4% more.

So these calls go through PTB's own request layer, ``BaseRequest.post`` of the bot's request
object: Telegram's answer is parsed and its errors raised exactly as for ``Bot``'s methods
(``RetryAfter``, ``ChatMigrated``, ``BadRequest``, ``Forbidden``, ``InvalidToken``,
``TimedOut``, ``NetworkError``), and what comes back is the answer's ``result`` as JSON.
Parameters are plain JSON values (a ``TelegramObject`` given is sent as its ``to_dict()``);
``None`` leaves a parameter out, as PTB does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from telegram import Bot, TelegramObject
from telegram._utils.defaultvalue import DEFAULT_NONE, DefaultValue  # PTB's "not given"
from telegram.error import TelegramError
from telegram.request import BaseRequest, RequestData
from telegram.request._requestparameter import RequestParameter  # RequestData's item type

log = logging.getLogger(__name__)

JSON = Any  # what json.loads gives: dict, list, str, int, float, bool or None


class BotApi:
    """Bot API methods posted as JSON, answered as JSON (see the module's docstring)."""

    def __init__(self, bot: Bot, *, updates_request: BaseRequest | None = None) -> None:
        self._bot = bot
        # getUpdates has its own connection (a long poll must not hold up a send)
        self._updates_request = updates_request

    async def call(
        self,
        method: str,
        params: Mapping[str, object],
        *,
        read_timeout: float | DefaultValue[None] | None = DEFAULT_NONE,
    ) -> JSON:
        """Post ``method`` with ``params``; Telegram's ``result``, or PTB's typed error."""
        data = RequestData(
            parameters=[
                RequestParameter(name, _encoded(value), None)
                for name, value in params.items()
                if value is not None
            ]
        )
        request = self._bot.request
        if method == "getUpdates" and self._updates_request is not None:
            request = self._updates_request
        # what PTB's Bot logs at DEBUG for its own calls, so log.level = "DEBUG" still shows
        # every Bot API call and its answer (never the token: it is in the URL only)
        log.debug("telegram: calling %s with %s", method, params)
        result = await request.post(
            url=f"{self._bot.base_url}/{method}", request_data=data, read_timeout=read_timeout
        )
        log.debug("telegram: %s answered %s", method, result)
        return result

    async def message_id(self, method: str, params: Mapping[str, object]) -> int:
        """``method`` (sendMessage, say) and the id of the message Telegram answers with."""
        result = await self.call(method, params)
        if not isinstance(result, dict) or type(result.get("message_id")) is not int:
            raise TelegramError(f"Telegram's answer to {method} has no message_id: {result!r:.200}")
        return int(result["message_id"])


def _encoded(value: object) -> str:
    """A parameter as the form field PTB sends (``RequestParameter.json_value``): a string
    as it is, anything else as JSON. Encoded once here: ``RequestData.json_parameters``
    encodes every value that is not a string twice, for every call."""
    return value if isinstance(value, str) else json.dumps(_jsonable(value))


def _jsonable(value: object) -> object:
    if isinstance(value, TelegramObject):
        return value.to_dict()
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
