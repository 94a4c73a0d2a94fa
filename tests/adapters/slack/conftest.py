"""The Slack test modules' fixtures: a fake Slack Web API (a test may name a subclass of it
with ``slack_support.with_fake``), the gateway's environment on it (HTTP mode, the bundled
reference runner; a test that needs more sets it on top), and for the surface's own tests a
real ``SlackSurface`` on the fake and a SQLite store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from fake_slack_api import FakeSlackApi
from slack_support import APP_TOKEN, BOT_TOKEN, slack_env, slack_surface, use_reference_runner

from adapters.slack.surface import SlackSurface
from bridge.store import SqliteStore


@pytest.fixture
async def fake(request: pytest.FixtureRequest) -> AsyncIterator[FakeSlackApi]:
    api_class: type[FakeSlackApi] = getattr(request, "param", FakeSlackApi)
    api = api_class(BOT_TOKEN, app_token=APP_TOKEN)
    await api.start()
    yield api
    await api.stop()


@pytest.fixture
def env(
    tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int], fake: FakeSlackApi
) -> Iterator[dict[str, str]]:
    environ = slack_env(tmp_path / "root", fake_dir, uid_range, fake)
    use_reference_runner(environ, fake_dir)
    yield environ
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


@pytest.fixture
async def surface(fake: FakeSlackApi) -> AsyncIterator[SlackSurface]:
    async with slack_surface(fake) as s:
        yield s


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "bridge.db")
    await s.open()
    yield s
    await s.close()
