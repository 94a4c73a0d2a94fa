"""Bot API calls answered as JSON (adapters/telegram/api.py), through PTB's request layer on
the gateway's aiohttp transport, against the fake Bot API: what is sent is what Bot's own
methods send, Telegram's refusals arrive as PTB's typed errors, and an answer that names no
message is an error that says so, not a message id made up."""

from __future__ import annotations

from typing import Any

import pytest
from fake_bot_api import Failure
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, MessageEntity
from telegram.error import BadRequest, ChatMigrated, Forbidden, RetryAfter, TelegramError
from tg_support import FakeBotApi

from adapters.telegram.api import BotApi
from adapters.telegram.calls import retry_seconds
from adapters.telegram.surface import TelegramSurface
from adapters.telegram.transport import AiohttpRequest

# PTB 22 itself warns when it builds a RetryAfter (its type becomes timedelta in v23)
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")

CHAT = 111


async def test_a_sent_message_is_answered_by_its_id_and_its_objects_go_as_json(
    surface: tuple[TelegramSurface, FakeBotApi],
) -> None:
    s, fake = surface
    markup = InlineKeyboardMarkup([[InlineKeyboardButton("Yes", callback_data="t:y")]])
    sent = await s.api.message_id(
        "sendMessage",
        {
            "chat_id": CHAT,
            "text": "hello world",
            "entities": (MessageEntity(MessageEntity.BOLD, 0, 5),),
            "reply_markup": markup,
            "message_thread_id": None,  # None: left out, as PTB leaves it out
        },
    )
    (call,) = fake.called("sendMessage")
    assert sent == call.result["message_id"]
    assert call.params["chat_id"] == CHAT and call.params["text"] == "hello world"
    assert call.params["entities"] == [{"type": "bold", "offset": 0, "length": 5}]
    assert call.params["reply_markup"] == {
        "inline_keyboard": [[{"text": "Yes", "callback_data": "t:y"}]]
    }
    assert "message_thread_id" not in call.params


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            {
                "ok": False,
                "error_code": 429,
                "description": "Too Many Requests: retry after 7",
                "parameters": {"retry_after": 7},
            },
            RetryAfter,
        ),
        (
            {
                "ok": False,
                "error_code": 400,
                "description": "Bad Request: group chat was upgraded to a supergroup chat",
                "parameters": {"migrate_to_chat_id": -1001},
            },
            ChatMigrated,
        ),
        ({"ok": False, "error_code": 403, "description": "Forbidden: bot was blocked"}, Forbidden),
        (
            {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"},
            BadRequest,
        ),
    ],
    ids=["429", "migrated", "403", "400"],
)
async def test_a_refusal_is_ptbs_own_typed_error(
    surface: tuple[TelegramSurface, FakeBotApi],
    body: dict[str, object],
    error: type[TelegramError],
) -> None:
    s, fake = surface
    status = body["error_code"]
    assert isinstance(status, int)
    fake.failures.append(Failure("sendMessage", status, body, lambda _p: True))
    with pytest.raises(error) as raised:
        await s.api.message_id("sendMessage", {"chat_id": CHAT, "text": "hi"})
    if isinstance(raised.value, RetryAfter):
        assert retry_seconds(raised.value) == 7
    if isinstance(raised.value, ChatMigrated):
        assert raised.value.new_chat_id == -1001


async def test_an_answer_without_a_message_id_is_an_error_naming_the_method(
    surface: tuple[TelegramSurface, FakeBotApi],
) -> None:
    s, fake = surface
    odd = {"ok": True, "result": True}
    fake.failures.append(Failure("sendMessage", 200, odd, lambda _p: True))
    with pytest.raises(TelegramError, match="sendMessage has no message_id"):
        await s.api.message_id("sendMessage", {"chat_id": CHAT, "text": "hi"})


class CountedRequest(AiohttpRequest):
    """The gateway's transport, counting the methods posted through it."""

    def __init__(self) -> None:
        super().__init__(pool_size=1)
        self.methods: list[str] = []

    async def do_request(self, url: str, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        self.methods.append(url.rpartition("/")[2])
        return await super().do_request(url, *args, **kwargs)


async def test_get_updates_goes_through_its_own_connection(fake: FakeBotApi) -> None:
    """A long poll must not hold up a send: getUpdates takes the request given for it, every
    other method the bot's."""
    sends, polls = CountedRequest(), CountedRequest()
    bot = Bot(fake.token, base_url=fake.api_url, request=sends, get_updates_request=polls)
    await bot.initialize()
    api = BotApi(bot, updates_request=polls)
    fake.queue_update(
        {
            "update_id": 7,
            "message": {
                "message_id": 1,
                "date": 0,
                "chat": {"id": CHAT, "type": "private"},
                "text": "hi",
            },
        }
    )
    try:
        updates = await api.call("getUpdates", {"timeout": 0})
        assert [u["update_id"] for u in updates] == [7]
        await api.message_id("sendMessage", {"chat_id": CHAT, "text": "hi"})
        assert (sends.methods, polls.methods) == (["getMe", "sendMessage"], ["getUpdates"])
    finally:
        await bot.shutdown()
