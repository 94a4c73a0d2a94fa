"""Fixtures of the engine's tests (``bridge/engine/``), and the support modules they import.

The support modules live beside the other gateway tests, not here: ``gateway_harness``,
``plain_surface`` and ``approval_support`` in ``tests/bridge``, ``faults_support`` and
``platforms_support`` in ``tests/faults``, the fake platforms in ``tests/adapters``. Their
directories go on ``sys.path`` here, once, before any test module of this directory is
imported (there are no packages under ``tests/``: modules are imported by base name).

The plain gateway's ``env`` (``gateway_env`` and its teardown) is a fixture here; a module
that needs other settings has its own. ``tests/conftest.py`` keeps a test in the
``JB_TEST_RUNNER=released`` session when its module or one of its fixtures builds on the
fake runner. The fake platforms the Slack and Telegram modules drive are fixtures here.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[2]
for extra in (
    TESTS / "bridge",
    TESTS / "faults",
    TESTS / "adapters" / "slack",
    TESTS / "adapters" / "telegram",
):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from accounts_support import remove_accounts  # noqa: E402
from fake_bot_api import FakeBotApi  # noqa: E402
from fake_slack_api import FakeSlackApi  # noqa: E402
from gateway_harness import gateway_env  # noqa: E402
from slack_support import APP_TOKEN, BOT_TOKEN  # noqa: E402
from tg_support import TOKEN  # noqa: E402


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    """The gateway on the fake runner with the harness's defaults."""
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


@pytest.fixture
async def slack_api() -> AsyncIterator[FakeSlackApi]:
    """The fake Slack Web API (``tests/adapters/slack``), with the Slack tests' tokens."""
    api = FakeSlackApi(BOT_TOKEN, app_token=APP_TOKEN)
    await api.start()
    yield api
    await api.stop()


@pytest.fixture
async def bot_api() -> AsyncIterator[FakeBotApi]:
    """The fake Telegram Bot API (``tests/adapters/telegram``), with the Telegram tests' token."""
    api = FakeBotApi(TOKEN)
    await api.start()
    yield api
    await api.stop()
