"""Review 4 (parity): the help a Slack DM gets said the ``!`` forms were for threads.

Slack keeps every message that starts with ``/`` for its own slash commands, in a DM as in
a thread: ``/new`` typed in a DM with the bot is refused by Slack's client ("/new is not a
valid command") and never reaches the gateway. The help (``!help`` in the DM) said "in a
Slack thread ... start them with ``!``", so a person in a DM, not in a thread, was told to
type ``/new``. It now says the ``!`` forms are Slack's, wherever on Slack.

The real gateway and Slack adapter against the fake Slack Web API.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway
from test_slack import DM, event, message, wait_post


async def test_the_help_in_a_slack_dm_says_to_start_commands_with_a_bang(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        assert await event(app.port, message("Ev0DMHELP", "!help", channel=DM, ts="17.1")) == 200
        (help_post,) = await wait_post(fake, "Commands", channel=DM)
        text = str(help_post.args.get("markdown_text") or help_post.args.get("text"))
        assert help_post.args.get("thread_ts") is None  # the DM itself, no thread
        assert "`!new`" in text
        assert "in a Slack thread" not in text and "`/new`" not in text, text  # "!" wherever
