"""Review: on Slack, the reference runner's own pointer to its directive list led nowhere.

Every answer of the bundled reference runner (what a new install talks to) says "send
`!help` for what it can pretend", and so does an unknown directive's note. On Slack the
adapter takes ``!help`` for the gateway's ``/help`` (Slack keeps ``/`` for its own commands),
so the person got the gateway's command help, which lists no directive, and had no way to
reach the runner's list at all. The directive the runner names must reach the runner on
every surface (the real gateway and Slack adapter against the fake Slack Web API).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway, wait_until
from test_slack import event, mention, posts, seen, wait_post


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    """The Slack modules' environment (conftest), single-account, the bundled runner."""
    env["JAZZ_BRIDGE_ISOLATION"] = "off"
    env.pop("JAZZ_BRIDGE_RUNNER__COMMAND", None)  # the bundled reference runner
    return env


def _texts(fake: FakeSlackApi, contains: str) -> list[str]:
    return [str(c.args.get("markdown_text") or c.args.get("text")) for c in posts(fake, contains)]


async def test_the_directive_list_the_runner_points_to_is_reachable_from_slack(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        root = "1764700000.000100"
        assert await event(app.port, mention("Ev0RRHELP1", "hello there", ts=root)) == 200
        (echo,) = [c for c in await wait_post(fake, "not an AI", timeout=60)]
        text = str(echo.args.get("markdown_text") or echo.args.get("text"))
        pointer = re.search(r"send `(![a-z-]+)`", text)
        assert pointer, f"the runner's answer names no directive for its list:\n{text}"
        asked = pointer.group(1)
        body = mention("Ev0RRHELP2", asked, ts="1764700000.000200", thread_ts=root)
        assert await event(app.port, body) == 200

        def answered() -> bool:
            return bool(_texts(fake, "Directives in a message") or _texts(fake, "Commands"))

        try:
            await wait_until(answered, 60, f"an answer to {asked!r}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the fake Slack API saw {seen(fake)}") from None
        assert _texts(fake, "Directives in a message"), (
            f"{asked!r}, as the runner said to send, got the gateway's command help on "
            f"Slack, not the runner's directive list: {_texts(fake, 'Commands')}"
        )
