"""Review: answering the agent's question or secret request "in thread" in a DM.

In a DM the gateway posts its prompts top-level, and Slack invites a reply to any message
with "Reply in thread". The adapter keys every DM thread as a conversation of its own
(``slack:<team>:<D…>:<thread_ts>``), so a secret typed as a thread reply to the gateway's
own "send it as your next message" prompt is not the answer: it is stored un-redacted and
run as a *prompt* in a fresh conversation (the agent gets the secret as chat text and keeps
it in that conversation's history), while the run that asked keeps waiting for it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway, use_reference_runner, wait_until
from test_slack import DM, TEAM, event, message, posted_ts, posts, wait_post

from bridge.model import InboxState

SECRET_VALUE = "hunter2-very-secret-value"


@pytest.fixture
def env(env: dict[str, str], fake_dir: Path) -> dict[str, str]:
    use_reference_runner(env, fake_dir)
    return env


async def test_a_secret_sent_as_a_thread_reply_to_the_dm_prompt_answers_it(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        ask = message("Ev0RVSEC1", "!secret API_TOKEN", ts="1764680000.000100", channel=DM)
        assert await event(app.port, ask) == 200
        (prompt,) = await wait_post(fake, "Send it as your next message", channel=DM)
        assert "thread_ts" not in prompt.args  # a DM prompt is posted top-level
        prompt_ts = posted_ts(fake, prompt)

        # Ada uses Slack's "Reply in thread" on the prompt and sends the secret there
        reply = message(
            "Ev0RVSEC2", SECRET_VALUE, ts="1764680010.000100", channel=DM, thread_ts=prompt_ts
        )
        assert await event(app.port, reply) == 200

        def settled() -> bool:
            return bool(posts(fake, "got a secret of", channel=DM)) or bool(
                posts(fake, SECRET_VALUE, channel=DM)
            )

        await wait_until(settled, 30, "the secret answered, or run as a prompt")
        leaked = [
            str(c.args.get("markdown_text") or c.args.get("text"))
            for c in posts(fake, SECRET_VALUE)
        ]
        assert not leaked, f"the secret was run as a prompt and echoed: {leaked[0][:200]}"
        assert posts(fake, "got a secret of", channel=DM)
        stored: list[Any] = []
        for state in InboxState:
            stored += await app.store.messages_in_state(state)
        assert not [m for m in stored if SECRET_VALUE in m.text], "the secret is kept un-redacted"
        keys = {m.thread_key for m in stored}
        assert keys == {f"slack:{TEAM}:{DM}"}, keys
