"""An artifact reaches Telegram under its own name, through the gateway's real transport.

The gateway's Bot API transport is aiohttp (``AiohttpRequest``); aiohttp's multipart form
percent-encodes a file name by default, and Telegram shows the name as it receives it
(aio-libs/aiohttp#3910: ``my report.pdf`` arrives as ``my%20report.pdf``). PTB's own httpx
transport sends the name as UTF-8, escaping only quotes and control characters.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fake_bot_api import FakeBotApi
from telegram import Bot

from adapters.telegram.surface import TelegramSurface
from adapters.telegram.transport import AiohttpRequest
from bridge.model import ReplyTarget

TOKEN = "999999999:AAreview3-upload-names"
TARGET = ReplyTarget("telegram", "telegram:111", {"chat_id": 111})


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


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("my report.pdf", "my report.pdf"),
        ("отчёт 2024.csv", "отчёт 2024.csv"),
        ("100% done.txt", "100% done.txt"),
        ('say "hi".txt', "say %22hi%22.txt"),  # as httpx (HTML5 form encoding) sends it
        ("line\nbreak.txt", "line%0Abreak.txt"),  # never a header of its own
    ],
)
async def test_a_file_keeps_its_name(
    surface: tuple[TelegramSurface, FakeBotApi], name: str, shown: str
) -> None:
    s, fake = surface
    await s.upload(TARGET, name, b"some data", "text/plain", reply_key=f"artifact:{name}")
    (call,) = fake.called("sendDocument")
    assert call.params["document"]["filename"] == shown


async def test_a_name_with_half_a_surrogate_pair_is_sent_not_retried_for_an_hour(
    surface: tuple[TelegramSurface, FakeBotApi],
) -> None:
    """A runner's JSON may name a file with a lone surrogate (a byte that is not UTF-8)."""
    s, fake = surface
    await s.upload(TARGET, "data\udcff.txt", b"x", "text/plain", reply_key="artifact:s")
    (call,) = fake.called("sendDocument")
    assert call.params["document"]["filename"] == "data\ufffd.txt"
