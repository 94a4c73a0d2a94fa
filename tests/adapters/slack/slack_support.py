"""What the Slack test modules share: the tokens the fake Slack API accepts, the signing
secret, and the gateway's environment on the fake (its fixtures are in ``conftest.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_slack_api import FakeSlackApi
from gateway_harness import gateway_env

__all__ = ["APP_TOKEN", "BOT_TOKEN", "SECRET", "FakeSlackApi", "slack_env"]

BOT_TOKEN = "xoxb-0000000000-test-token-for-the-fake"
APP_TOKEN = "xapp-1-A0APP00001-test-app-token"
SECRET = "0123456789abcdef0123456789abcdef"


def slack_env(
    root: Path, fake_dir: Path, uid_range: tuple[int, int], fake: FakeSlackApi
) -> dict[str, str]:
    """The gateway with Slack in HTTP mode against ``fake``, open to every workspace."""
    return gateway_env(
        root,
        fake_dir,
        uid_range,
        JAZZ_BRIDGE_SLACK__BOT_TOKEN=BOT_TOKEN,
        JAZZ_BRIDGE_SLACK__SIGNING_SECRET=SECRET,
        JAZZ_BRIDGE_SLACK__API_URL=fake.api_url,
        JAZZ_BRIDGE_SLACK__ALLOW_EVERYONE="true",
    )
