"""A message forwarded to the bot reaches the agent.

Slack's "Forward message" (and a shared message) puts the forwarded message in the event's
``attachments`` (``is_share``), with the top-level ``text`` empty, or only the comment the
person added. The converter read only ``text`` and ``files``: a forward with no comment was
answered with the /help text, and one with "summarize this" ran without the message it was
about.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway, use_reference_runner
from test_slack import CHANNEL, DM, GRACE, event, message, posts, wait_post


@pytest.fixture
def env(env: dict[str, str], fake_dir: Path) -> dict[str, str]:
    use_reference_runner(env, fake_dir)
    return env


def shared(text: str) -> dict[str, Any]:
    """The attachment Slack adds for a forwarded message (its real field layout)."""
    return {
        "ts": "1764600000.000100",
        "channel_id": CHANNEL,
        "channel_team": "T0TEAM0001",
        "is_msg_unfurl": True,
        "is_share": True,
        "id": 1,
        "original_url": f"https://acme.slack.com/archives/{CHANNEL}/p1764600000000100",
        "fallback": f"[December 1st, 2025 2:40 PM] grace: {text}",
        "text": text,
        "author_id": GRACE,
        "author_subname": "Grace",
        "author_name": "Grace",
        "mrkdwn_in": ["text"],
        "color": "D0D0D0",
        "from_url": f"https://acme.slack.com/archives/{CHANNEL}/p1764600000000100",
        "footer": "Posted in #incidents",
    }


async def test_a_forward_without_a_comment_is_the_request(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        fwd = message("Ev0FWD1", "", ts="1764682000.000100", channel=DM)
        fwd["event"]["attachments"] = [shared("the db failover runbook is out of date")]
        assert await event(app.port, fwd) == 200
        (answer,) = await wait_post(fake, "failover runbook", channel=DM, timeout=15)
        assert "Grace" in answer.args["markdown_text"]
        assert not posts(fake, "`!new`", channel=DM), "answered with the help text"


async def test_a_forward_with_a_comment_carries_the_forwarded_message(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        fwd = message("Ev0FWD2", "summarize this please", ts="1764682100.000100", channel=DM)
        fwd["event"]["attachments"] = [shared("rotate the &lt;prod&gt; keys on Friday")]
        assert await event(app.port, fwd) == 200
        (answer,) = await wait_post(fake, "summarize this please", channel=DM, timeout=15)
        assert "rotate the <prod> keys on Friday" in answer.args["markdown_text"]


async def test_a_forwarded_file_is_downloaded_and_odd_files_do_not_fail(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        f = fake.add_file("postmortem.txt", b"root cause: dns\n")
        fwd = message("Ev0FWD3", "what went wrong?", ts="1764682200.000100", channel=DM)
        fwd["event"]["attachments"] = [{**shared("see attached"), "files": [f]}]
        assert await event(app.port, fwd) == 200
        (answer,) = await wait_post(fake, "what went wrong?", channel=DM, timeout=15)
        assert "Attachments: 1" in answer.args["markdown_text"]
        assert [d[0] for d in fake.downloads] == [f["id"]]
        # a forwarded message's files are not checked by the guard: a number there is no file
        odd = message("Ev0FWD4", "and this?", ts="1764682300.000100", channel=DM)
        odd["event"]["attachments"] = [{**shared("odd"), "files": 5}]
        assert await event(app.port, odd) == 200
        await wait_post(fake, "and this?", channel=DM, timeout=15)
