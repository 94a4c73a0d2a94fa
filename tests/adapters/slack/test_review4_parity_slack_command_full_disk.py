"""Review 4 (parity): ``/jazz status`` (or new, stop) while the gateway cannot store it.

A command the gateway cannot store (its state disk full) is refused with a reason in the web
chat (507 "the gateway's disk is full: this was NOT stored") and on Telegram the webhook's
507 has Telegram deliver it again once there is room. Slack never sends a slash command
again: the store's error went up through bolt, Slack was answered 500 and showed its own
"dispatch_failed", and the person was not told that nothing was done or why. The command's
ack now says it was not stored and to send it again later.

The real gateway and bolt against the fake Slack Web API, the state directory on a small
tmpfs that is filled (root only).
"""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_review4_parity_slack_press_failure as full_disk
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway
from test_slack import ADA, DM, TEAM, event, send, vector, wait_post

# the fixtures of the press test: the gateway's environment (this directory's conftest
# has the fake Slack API), the tmpfs
env, tiny_state = full_disk.env, full_disk.tiny_state
fill, refuses_writes = full_disk.fill, full_disk.refuses_writes


def slash(text: str) -> bytes:
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
        "trigger_id": "trigger-review4-full-disk",
    }
    return urlencode(form).encode()


async def test_a_command_that_could_not_be_stored_says_so(
    env: dict[str, str], fake: FakeSlackApi, tiny_state: Path
) -> None:
    async with running_gateway(env) as (app, client):
        assert await event(app.port, vector("direct_message")) == 200
        await wait_post(fake, "deploy config", channel=DM)
        filler = fill(tiny_state)
        await refuses_writes(client)
        status, text = await send(app.port, slash("status"), form=True)
        assert status == 200, (status, text)
        assert "NOT" in text and "full" in text, text
        filler.unlink()
        status, text = await send(app.port, slash("status"), form=True)
        assert status == 200 and "the answer is here" in text, (status, text)
        await wait_post(fake, "Idle", channel=DM)
