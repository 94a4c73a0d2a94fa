"""``/help`` names the commands the person can actually send where they asked.

Slack keeps every message that starts with ``/`` for its own slash commands: in a thread,
``/new`` is refused by Slack's client ("/new is not a valid command") and never reaches the
gateway, which is why the Slack adapter takes ``!new``, ``!status``, ``!stop`` and ``!help``
instead. The help a Slack user gets from ``!help`` (the real gateway, the real Slack adapter
against a fake Slack Web API) must tell them so.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway, wait_until
from slack_support import event, mention, posts, seen, slack_env

SLACK_THREAD_COMMANDS = ("new", "status", "stop", "help")


@pytest.fixture
def env(
    tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int], slack_api: FakeSlackApi
) -> Iterator[dict[str, str]]:
    e = slack_env(tmp_path / "root", fake_dir, uid_range, slack_api)
    e["JAZZ_BRIDGE_ISOLATION"] = "off"
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_the_help_a_slack_thread_gets_names_the_commands_slack_lets_through(
    env: dict[str, str], slack_api: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        root = "1764700000.000100"
        assert await event(app.port, mention("Ev0HELP01", "!help", ts=root)) == 200

        def helps() -> list[str]:
            return [
                str(c.args.get("markdown_text") or c.args.get("text"))
                for c in posts(slack_api, "Commands")
            ]

        try:
            await wait_until(lambda: bool(helps()), 20, "the help posted in the thread")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the fake Slack API saw {seen(slack_api)}") from None
        (text,) = helps()
        missing = [
            f"!{word}" for word in SLACK_THREAD_COMMANDS if not re.search(rf"`!{word}`", text)
        ]
        assert not missing, (
            f"the help a Slack thread got never says to write {missing} (Slack refuses "
            f"'/new' in a thread, so its commands start with '!'):\n{text}"
        )
