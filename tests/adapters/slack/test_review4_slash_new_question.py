"""Review: ``/jazz new <question>`` dropped the question.

In a thread ``!new what is 2+2`` starts a fresh conversation *with* the question (the core's
``/new <message>``), and the help says so. ``/jazz new what is 2+2`` in the channel (or the
DM) kept only the first word: the conversation was started afresh, the "fresh
conversation" notice came, and the question the person typed was never run nor answered.
Slack escapes ``&``, ``<`` and ``>`` in a command's text as in a message's.

The real gateway, bolt and AsyncWebClient against the fake Slack Web API.
"""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway, use_reference_runner
from test_slack import DM, TEAM, event, send, vector, wait_post

ADA = "U0USER0001"


def slash(text: str, n: int) -> bytes:
    form = {
        "token": "x",
        "team_id": TEAM,
        "channel_id": DM,
        "channel_name": "directmessage",
        "user_id": ADA,
        "user_name": "ada",
        "command": "/jazz",
        "text": text,
        "response_url": "https://hooks.slack.com/commands/T/1/x",
        "trigger_id": f"trigger-review4-{n}",
    }
    return urlencode(form).encode()


async def test_jazz_new_with_a_question_runs_the_question(
    env: dict[str, str], fake: FakeSlackApi, fake_dir: Path
) -> None:
    use_reference_runner(env, fake_dir)
    async with running_gateway(env) as (app, _client):
        assert await event(app.port, vector("direct_message")) == 200
        await wait_post(fake, "deploy config", channel=DM)
        status, text = await send(app.port, slash("new is 2 &lt; 3 &amp; true?", 1), form=True)
        assert status == 200, (status, text)
        await wait_post(fake, "fresh conversation", channel=DM)
        # the reference runner echoes the prompt: the question itself is answered
        await wait_post(fake, "is 2 < 3 & true?", channel=DM)
