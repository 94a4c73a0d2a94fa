"""Review: who stopped a run, as the thread is told, when an operator presses Stop.

Every other line about a person names them as Slack shows a person (``<@U…>``, the sender
name the adapter gives the core): "asked by <@U…>", "Stopped by <@U…>" after ``!stop``.
An operator's press on someone else's Stop button is told as "Stopped by U0USER0002": the
raw member id, which Slack shows as that string, not as the person.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_slack_api import Call, FakeSlackApi
from gateway_harness import running_gateway, use_reference_runner, wait_until
from test_slack import (
    GRACE,
    action,
    buttons,
    event,
    mention,
    posted_ts,
    press_payload,
    wait_post,
)


@pytest.fixture
def env(env: dict[str, str], fake_dir: Path) -> dict[str, str]:
    use_reference_runner(env, fake_dir)
    env["JAZZ_BRIDGE_SLACK__OPERATORS"] = f'["{GRACE}"]'
    return env


async def test_an_operators_stop_names_them_as_slack_shows_a_person(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        root = "1764695000.000100"
        assert await event(app.port, mention("Ev0RVOPS1", "!delay 30", ts=root)) == 200

        def bubble() -> list[Call]:
            return [c for c in fake.called("chat.postMessage") if buttons(c)]

        await wait_until(lambda: bool(bubble()), 15, "a progress message with a Stop button")
        (stop,) = buttons(bubble()[0])
        ts = posted_ts(fake, bubble()[0])
        # Grace, an operator, stops Ada's run
        assert await action(app.port, press_payload(stop["value"], GRACE, bubble()[0], ts)) == 200
        (stopped,) = await wait_post(fake, "Stopped by")
        text = str(stopped.args.get("markdown_text") or stopped.args.get("text"))
        assert f"<@{GRACE}>" in text, text
