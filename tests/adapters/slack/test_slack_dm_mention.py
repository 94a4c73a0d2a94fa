"""A mention in a DM is the DM's conversation, whichever of its two events comes first.

Slack may send a DM message that mentions the bot twice: as ``message.im`` (with
``channel_type: im``) and as ``app_mention`` (with no ``channel_type``). The first taken
is run, the other dropped as its duplicate. The app_mention was keyed as a thread of its
own (``slack:T:D…:ts``) with its answer in a thread, so the DM's one conversation split
whenever it came first.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway, use_reference_runner
from test_slack import DM, TEAM, event, mention, message, wait_post

from bridge.model import InboxState


@pytest.fixture
def env(env: dict[str, str], fake_dir: Path) -> dict[str, str]:
    use_reference_runner(env, fake_dir)
    return env


async def test_a_dm_mention_taken_first_continues_the_dm(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        first = message("Ev0DMMEN1", "hello there", ts="1764681000.000100", channel=DM)
        assert await event(app.port, first) == 200
        await wait_post(fake, "hello there", channel=DM)
        ts = "1764681010.000100"
        assert await event(app.port, mention("Ev0DMMEN2", "and again", ts=ts, channel=DM)) == 200
        (answer,) = await wait_post(fake, "and again", channel=DM)
        assert "thread_ts" not in answer.args, answer.args  # in the DM, not a thread
        twin = message("Ev0DMMEN3", "<@U0BOT00001> and again", ts=ts, channel=DM)
        assert await event(app.port, twin) == 200  # the same message: not run twice
        stored: list[Any] = []
        for state in InboxState:
            stored += await app.store.messages_in_state(state)
        assert {m.thread_key for m in stored} == {f"slack:{TEAM}:{DM}"}
        assert len(stored) == 2, [m.text for m in stored]
