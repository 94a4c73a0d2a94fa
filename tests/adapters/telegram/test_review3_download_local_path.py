"""A ``getFile`` path naming a file on the gateway's own machine is refused, never read.

python-telegram-bot reads a ``file_path`` that exists locally from the disk instead of
downloading it. A Bot API server that answers ``getFile`` with ``/etc/shadow`` (hostile, or
a self-hosted one in ``--local`` mode) had the gateway, running as root, copy that file into
the conversation's home as the person's attachment.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fake_bot_api import FakeBotApi
from telegram import Bot

from adapters.telegram.surface import TelegramSurface
from adapters.telegram.transport import AiohttpRequest
from bridge.model import Attachment
from bridge.ports import DeliveryError

TOKEN = "999999999:AAreview3-download-local-path"


@pytest.fixture
async def surface() -> AsyncIterator[tuple[TelegramSurface, FakeBotApi]]:
    fake = FakeBotApi(TOKEN)
    await fake.start()
    bot = Bot(
        TOKEN,
        base_url=fake.api_url,
        base_file_url=f"http://127.0.0.1:{fake.port}/file/bot",
        request=AiohttpRequest(pool_size=2),
    )
    await bot.initialize()
    try:
        yield TelegramSurface(bot, min_interval_s=0.0), fake
    finally:
        await bot.shutdown()
        await fake.stop()


@pytest.mark.parametrize("where", ["absolute", "relative", "dot-dot"])
async def test_a_local_file_path_is_refused_not_read(
    surface: tuple[TelegramSurface, FakeBotApi],
    tmp_path: Path,
    where: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s, fake = surface
    secret = tmp_path / "gateway-secret.txt"
    secret.write_text("the gateway's own file")
    monkeypatch.chdir(tmp_path)
    path = {
        "absolute": str(secret),
        "relative": secret.name,
        "dot-dot": f"../{tmp_path.name}/{secret.name}",
    }[where]
    fake.add_file("f1", path, b"what Telegram holds")
    with pytest.raises(DeliveryError) as refused:
        data = await s.download(Attachment(name="report.pdf", platform_id="f1"), 10_000)
        pytest.fail(f"the download returned {data!r}")
    assert refused.value.permanent and "report.pdf" in str(refused.value)


async def test_a_file_of_the_file_server_still_downloads(
    surface: tuple[TelegramSurface, FakeBotApi],
) -> None:
    s, fake = surface
    fake.add_file("f2", "documents/file_2.txt", b"hello")
    assert await s.download(Attachment(name="f2.txt", platform_id="f2"), 1000) == b"hello"
