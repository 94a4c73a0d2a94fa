"""A message whose files Slack did not make available (deleted, hidden by the workspace's
storage limit, still processing) reaches the agent with a word about them.

Such a file comes without a download link; it was dropped without a word, so a message of
only such a file was answered with the /help text, and "what is in it?" ran as if nothing
had been shared.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway, use_reference_runner
from test_slack import DM, event, message, posts, wait_post


@pytest.fixture
def env(env: dict[str, str], fake_dir: Path) -> dict[str, str]:
    use_reference_runner(env, fake_dir)
    return env


async def test_files_slack_did_not_make_available_are_named_to_the_agent(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        hidden = message("Ev0GONE1", "", ts="1764683000.000100", channel=DM)
        hidden["event"]["subtype"] = "file_share"
        hidden["event"]["files"] = [
            {"id": "F0GONE0001", "mode": "hidden_by_limit", "name": "q3-report.pdf"}
        ]
        assert await event(app.port, hidden) == 200
        (answer,) = await wait_post(fake, "q3-report.pdf", channel=DM, timeout=15)
        assert "did not make available" in answer.args["markdown_text"]
        assert not posts(fake, "`!new`", channel=DM), "answered with the help text"

        asked = message("Ev0GONE2", "what is in it?", ts="1764683100.000100", channel=DM)
        asked["event"]["subtype"] = "file_share"
        asked["event"]["files"] = [{"id": "F0GONE0002", "mode": "tombstone"}]
        assert await event(app.port, asked) == 200
        (answer,) = await wait_post(fake, "what is in it?", channel=DM, timeout=15)
        assert "shared a file, which Slack did not make available" in answer.args["markdown_text"]
