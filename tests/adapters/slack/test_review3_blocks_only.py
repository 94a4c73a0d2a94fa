"""A message whose words are only in its rich-text ``blocks`` (``text`` empty) is run.

Slack's ``text`` is a fallback; what a person typed is the message's ``rich_text`` block.
A message that came with the block and an empty ``text`` was taken for an empty mention
and answered with the /help text.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway, use_reference_runner
from test_slack import BOT, DM, GRACE, event, mention, message, posts, wait_post


@pytest.fixture
def env(env: dict[str, str], fake_dir: Path) -> dict[str, str]:
    use_reference_runner(env, fake_dir)
    return env


def rich(*elements: dict[str, Any]) -> list[dict[str, Any]]:
    section = {"type": "rich_text_section", "elements": list(elements)}
    return [{"type": "rich_text", "block_id": "b1", "elements": [section]}]


async def test_a_dm_with_only_blocks_is_run(env: dict[str, str], fake: FakeSlackApi) -> None:
    async with running_gateway(env) as (app, _client):
        body = message("Ev0BLK1", "", ts="1764683000.000100", channel=DM)
        body["event"]["blocks"] = rich(
            {"type": "text", "text": "compare a<b & c with "},
            {"type": "user", "user_id": GRACE},
        )
        assert await event(app.port, body) == 200
        (answer,) = await wait_post(fake, "compare a<b & c with", channel=DM, timeout=15)
        assert f"<@{GRACE}>" in answer.args["markdown_text"]
        assert not posts(fake, "`!new`", channel=DM), "answered with the help text"


async def test_a_mention_with_only_blocks_loses_the_bots_mention(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        body = mention("Ev0BLK2", "", ts="1764683100.000100")
        body["event"]["text"] = ""
        body["event"]["blocks"] = rich(
            {"type": "user", "user_id": BOT}, {"type": "text", "text": " list the open incidents"}
        )
        assert await event(app.port, body) == 200
        (answer,) = await wait_post(fake, "list the open incidents", timeout=15)
        assert f"<@{BOT}>" not in answer.args["markdown_text"]
