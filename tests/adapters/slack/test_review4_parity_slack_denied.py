"""Review 4 (parity): someone not on the allowlist presses a button, or types ``/jazz``.

On Telegram a press by someone the allowlist leaves out is answered "You are not allowed to
use this bot." (an alert only they see). On Slack the same press, in an allowed channel by a
user outside ``slack.allowed_users``, was acked and nothing more: the button did nothing and
no one said why; ``/jazz status`` from them vanished with an empty ack. Both now tell the
presser (an ephemeral message, the command's own ack), the conversation untouched.

The real gateway, bolt and AsyncWebClient against the fake Slack Web API.
"""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlencode

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway, use_reference_runner, wait_until
from test_slack import (
    ADA,
    CHANNEL,
    GRACE,
    TEAM,
    action,
    buttons,
    event,
    mention,
    posted_ts,
    posts,
    press_payload,
    send,
    wait_post,
)


@pytest.fixture
def env(env: dict[str, str], fake_dir: Path) -> dict[str, str]:
    """The Slack modules' environment, the reference runner, and only Ada allowed."""
    use_reference_runner(env, fake_dir)
    env.pop("JAZZ_BRIDGE_SLACK__ALLOW_EVERYONE")
    env["JAZZ_BRIDGE_SLACK__ALLOWED_USERS"] = f'["{ADA}"]'
    return env


def slash(text: str, user: str) -> bytes:
    form = {
        "token": "x",
        "team_id": TEAM,
        "channel_id": CHANNEL,
        "channel_name": "general",
        "user_id": user,
        "user_name": "someone",
        "command": "/jazz",
        "text": text,
        "response_url": "https://hooks.slack.com/commands/T/1/x",
        "trigger_id": f"trigger-parity-{user}",
    }
    return urlencode(form).encode()


async def test_a_press_by_someone_not_allowed_is_told_so(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        asked = mention("Ev0PARITY1", "!approve bash", ts="1764669800.000100")
        assert await event(app.port, asked) == 200
        (prompt,) = await wait_post(fake, "Approval needed")
        approve = next(b for b in buttons(prompt) if b["text"]["text"] == "Approve")
        ts = posted_ts(fake, prompt)

        assert await action(app.port, press_payload(approve["value"], GRACE, prompt, ts)) == 200
        await wait_until(
            lambda: bool(fake.called("chat.postEphemeral")), 10, "a word to the presser"
        )
        (told,) = fake.called("chat.postEphemeral")
        assert told.args["user"] == GRACE and "not allowed" in told.args["text"]
        assert told.args["thread_ts"] == "1764669800.000100"
        assert not posts(fake, "approved")  # Grace's press answered nothing

        assert await action(app.port, press_payload(approve["value"], ADA, prompt, ts)) == 200
        await wait_post(fake, "bash")  # Ada's own press still answers it


async def test_jazz_from_someone_not_allowed_is_told_so(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        status, text = await send(app.port, slash("status", GRACE), form=True)
        assert status == 200, (status, text)
        assert "not allowed" in text, text
