"""Review (design gap): ``slack.allowed_teams`` and Slack Connect (externally shared channels).

In a channel shared with another organisation, a member of that organisation mentions the
bot: the envelope's ``team_id`` is the workspace the app is installed in, while the event's
``user_team`` / ``team`` name the sender's own workspace. The adapter checks the allowlist
against the envelope's team first, so an operator who set ``allowed_teams = ["<ours>"]`` to
keep the agent (and its spend, and its files) to their own people serves every external
member of every Slack Connect channel the bot is in.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway, use_reference_runner
from test_slack import TEAM, event, sample, stored, vector

EXTERNAL_TEAM, EXTERNAL_USER = "T0EXTERN01", "U0EXTERN01"


@pytest.fixture
def env(env: dict[str, str], fake_dir: Path) -> dict[str, str]:
    use_reference_runner(env, fake_dir)
    env["JAZZ_BRIDGE_SLACK__ALLOW_EVERYONE"] = "false"
    env["JAZZ_BRIDGE_SLACK__ALLOWED_TEAMS"] = f'["{TEAM}"]'
    return env


async def test_an_external_member_of_a_shared_channel_is_not_in_allowed_teams(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    body = copy.deepcopy(vector("app_mention"))
    body["event_id"] = "Ev0RVEXT01"
    body["is_ext_shared_channel"] = True
    body["event"].update(
        user=EXTERNAL_USER,
        team=EXTERNAL_TEAM,
        user_team=EXTERNAL_TEAM,
        source_team=EXTERNAL_TEAM,
        ts="1764690000.000100",
        event_ts="1764690000.000100",
    )
    async with running_gateway(env) as (app, _client):
        assert await event(app.port, body) == 200
        denied = sample(app, "jazz_bridge_messages_total", platform="slack", outcome="denied")
        assert (denied, await stored(app)) == (1, 0), (
            f"a member of {EXTERNAL_TEAM} was let in by allowed_teams=[{TEAM}] "
            f"(denied={denied}, stored={await stored(app)})"
        )
