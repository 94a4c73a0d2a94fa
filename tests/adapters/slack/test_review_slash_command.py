"""Review: ``/jazz`` must work whatever the channel, workspace or person is called.

A slash command arrives form-encoded (no ``payload=`` field). bolt's ``parse_body`` takes
any form body that merely *contains* the text "payload" for an interactivity payload, finds
no ``payload`` field and returns ``{}``; guard.parse and bolt's dispatch both use it, so the
command is never matched and Slack gets a 404 ("/jazz failed with the error
http_client_error"). Any ``/jazz`` typed in a channel named e.g. ``#payload-team``, by a user
named ``payload-bot-admin``, or with the word in its text, fails that way.
"""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway, use_reference_runner
from test_slack import CHANNEL, TEAM, send

ADA = "U0USER0001"


def slash_form(text: str, *, channel_name: str, user_name: str = "ada", n: int = 0) -> bytes:
    form = {
        "token": "x",
        "team_id": TEAM,
        "team_domain": "example",
        "channel_id": CHANNEL,
        "channel_name": channel_name,
        "user_id": ADA,
        "user_name": user_name,
        "command": "/jazz",
        "text": text,
        "api_app_id": "A0APP00001",
        "response_url": "https://hooks.slack.com/commands/T/1/x",
        "trigger_id": f"trigger-review-{n}",
    }
    return urlencode(form).encode()


async def test_jazz_works_in_a_channel_whose_name_contains_payload(
    env: dict[str, str], fake: FakeSlackApi, fake_dir: Path
) -> None:
    use_reference_runner(env, fake_dir)
    async with running_gateway(env) as (app, _client):
        # the control: the same command in a channel with an ordinary name
        status, text = await send(app.port, slash_form("help", channel_name="incidents"), form=True)
        assert status == 200 and "!status" in text, (status, text)
        # the same command in #payload-team: answered the same, not a 404
        body = slash_form("help", channel_name="payload-team", n=1)
        status, text = await send(app.port, body, form=True)
        assert status == 200 and "!status" in text, (status, text)


async def test_jazz_with_payload_in_its_text_gets_the_unknown_command_help(
    env: dict[str, str], fake: FakeSlackApi, fake_dir: Path
) -> None:
    use_reference_runner(env, fake_dir)
    async with running_gateway(env) as (app, _client):
        body = slash_form("payload", channel_name="incidents", n=2)
        status, text = await send(app.port, body, form=True)
        assert status == 200 and "Unknown command" in text, (status, text)
