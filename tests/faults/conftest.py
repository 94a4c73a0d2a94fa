"""What the fault suite's modules share: the test directories they import from, and the
fake platform servers.

The suite drives the real gateway with the real Slack and Telegram clients, so its modules
import the gateway harness (``tests/bridge``) and the fake Slack Web API and Bot API
(``tests/adapters/slack``, ``tests/adapters/telegram``); those directories are put on the
path here, once, before any module of the suite is imported. A module that needs a fake
platform names its credentials (``TG_TOKEN``, ``SLACK_TOKEN``) and takes the fixture.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent.parent
for extra in (TESTS / "bridge", TESTS / "adapters" / "slack", TESTS / "adapters" / "telegram"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from fake_bot_api import FakeBotApi  # noqa: E402
from fake_slack_api import FakeSlackApi  # noqa: E402
from platforms_support import SLACK_BOT_TOKEN, TG_TOKEN, running_fakes  # noqa: E402


@pytest.fixture
async def bot_api(request: pytest.FixtureRequest) -> AsyncIterator[FakeBotApi]:
    """A fake Bot API that knows the module's bot token (``TG_TOKEN``)."""
    api = FakeBotApi(request.module.TG_TOKEN)
    await api.start()
    yield api
    await api.stop()


@pytest.fixture
async def slack_api(request: pytest.FixtureRequest) -> AsyncIterator[FakeSlackApi]:
    """A fake Slack Web API that knows the module's bot token (``SLACK_TOKEN``)."""
    api = FakeSlackApi(request.module.SLACK_TOKEN)
    await api.start()
    yield api
    await api.stop()


@pytest.fixture
async def fakes(request: pytest.FixtureRequest) -> AsyncIterator[tuple[FakeSlackApi, FakeBotApi]]:
    """Both fake platforms at once, with the module's tokens if it names its own."""
    slack_token = getattr(request.module, "SLACK_TOKEN", SLACK_BOT_TOKEN)
    tg_token = getattr(request.module, "TG_TOKEN", TG_TOKEN)
    async with running_fakes(slack_token, tg_token) as both:
        yield both
