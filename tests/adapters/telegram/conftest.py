"""The Telegram test modules' fixtures: a fake Bot API, the gateway's environment on it
(webhook mode; ``tg_support.polling`` turns it to polling), and for the surface's own tests
a real ``TelegramSurface`` (PTB's ``Bot`` on the gateway's aiohttp transport) on the fake."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from tg_support import TOKEN, FakeBotApi, surface_on, telegram_env

from adapters.telegram.surface import TelegramSurface


@pytest.fixture
async def fake() -> AsyncIterator[FakeBotApi]:
    api = FakeBotApi(TOKEN)
    await api.start()
    yield api
    await api.stop()


@pytest.fixture
def env(
    tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int], fake: FakeBotApi
) -> Iterator[dict[str, str]]:
    yield telegram_env(tmp_path / "root", fake_dir, uid_range, fake)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


@pytest.fixture
async def surface(fake: FakeBotApi) -> AsyncIterator[tuple[TelegramSurface, FakeBotApi]]:
    """The surface on ``fake``, and ``fake`` (files served from its file server)."""
    async with surface_on(fake) as s:
        yield s, fake
