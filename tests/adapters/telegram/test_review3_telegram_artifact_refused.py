"""An artifact Telegram will not take is named in the chat, at once, instead of silence.

Telegram answers a file over its upload limit (50 MB for a bot) with HTTP 413 "Request
Entity Too Large", which PTB raises as a NetworkError: a passing failure to the core, which
retried the upload for an hour (holding the conversation's later replies), then recorded
it as failed without a word in the chat. An empty file is refused with a 400 ("file must be
non-empty"): recorded as failed at once, and the person never heard of it either.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fake_bot_api import Failure, FakeBotApi
from telegram import Bot

from adapters.telegram.surface import TelegramSurface
from adapters.telegram.transport import AiohttpRequest
from bridge.model import ReplyTarget

TOKEN = "999999999:AAreview3-artifact-refused"
CHAT = 111
TARGET = ReplyTarget("telegram", f"telegram:{CHAT}", {"chat_id": CHAT})
TOO_LARGE = {"ok": False, "error_code": 413, "description": "Request Entity Too Large"}
EMPTY = {"ok": False, "error_code": 400, "description": "Bad Request: file must be non-empty"}


@pytest.fixture
async def surface() -> AsyncIterator[tuple[TelegramSurface, FakeBotApi]]:
    fake = FakeBotApi(TOKEN)
    await fake.start()
    bot = Bot(
        TOKEN,
        base_url=fake.api_url,
        request=AiohttpRequest(pool_size=4),
        get_updates_request=AiohttpRequest(pool_size=1),
    )
    await bot.initialize()
    s = TelegramSurface(bot, min_interval_s=0.0)
    try:
        yield s, fake
    finally:
        await s.close()
        await bot.shutdown()
        await fake.stop()


def refuse(fake: FakeBotApi, method: str, status: int, body: dict[str, object]) -> None:
    fake.failures.append(Failure(method, status, body, lambda _p: True))


async def test_a_file_over_telegrams_upload_limit_is_named_in_the_chat(
    surface: tuple[TelegramSurface, FakeBotApi],
) -> None:
    s, fake = surface
    refuse(fake, "sendDocument", 413, TOO_LARGE)
    data = b"\0" * 300_000  # the fake's body limit; the size is what Telegram refuses
    ref = await s.upload(TARGET, "dump.bin", data, None, reply_key="artifact:1:0")
    (note,) = fake.called("sendMessage")
    assert ref == f"{CHAT}:{note.result['message_id']}"
    text = note.params["text"]
    assert "dump.bin" in text and "300,000 bytes" in text and "50 MB" in text, text
    assert not fake.called("sendDocument")  # the one call was refused; not tried again


async def test_a_file_telegram_refuses_is_named_with_telegrams_reason(
    surface: tuple[TelegramSurface, FakeBotApi],
) -> None:
    s, fake = surface
    refuse(fake, "sendPhoto", 400, EMPTY)  # an empty .png: not a photo, then not a document
    refuse(fake, "sendDocument", 400, EMPTY)
    await s.upload(TARGET, "plot.png", b"", "image/png", reply_key="artifact:2:0")
    (note,) = fake.called("sendMessage")
    assert "plot.png" in note.params["text"] and "non-empty" in note.params["text"]


async def test_a_chat_that_blocked_the_bot_gets_no_note(
    surface: tuple[TelegramSurface, FakeBotApi],
) -> None:
    """A refusal of the chat, not of the file, is the core's to record (no note can land)."""
    s, fake = surface
    fake.fail_next("sendDocument", "forbidden")
    with pytest.raises(Exception, match="blocked") as err:
        await s.upload(TARGET, "a.txt", b"x", "text/plain", reply_key="artifact:3:0")
    assert getattr(err.value, "permanent", False)
    assert not fake.called("sendMessage", ok=True) and not fake.called("sendMessage", ok=False)
