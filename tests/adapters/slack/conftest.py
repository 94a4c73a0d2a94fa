"""The Slack test modules' fixtures: a fake Slack Web API, and the gateway's environment on it
(HTTP mode; a module that needs more overrides ``env`` on top of this one)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from fake_slack_api import FakeSlackApi
from slack_support import APP_TOKEN, BOT_TOKEN, slack_env


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlackApi]:
    api = FakeSlackApi(BOT_TOKEN, app_token=APP_TOKEN)
    await api.start()
    yield api
    await api.stop()


@pytest.fixture
def env(
    tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int], fake: FakeSlackApi
) -> Iterator[dict[str, str]]:
    yield slack_env(tmp_path / "root", fake_dir, uid_range, fake)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")
