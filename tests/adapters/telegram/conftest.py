"""The Telegram test modules' fixtures: a fake Bot API, and the gateway's environment on it
(webhook mode; a module that polls overrides ``env`` on top of this one)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from tg_support import TOKEN, FakeBotApi, telegram_env


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
