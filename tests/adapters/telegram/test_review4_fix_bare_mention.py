"""A bare mention of the bot in a group ("@jazz_example_bot", nothing else) is answered
with the /help text, as Slack answers a bare mention, instead of running the agent on the
text "@jazz_example_bot".

The real gateway and PTB client against the fake Bot API (webhook); every wait bounded.
"""

from __future__ import annotations

import pytest
from tg_support import (
    ADA,
    BOT_NAME,
    GROUP,
    GROUP_CHAT,
    FakeBotApi,
    mention,
    post,
    running_gateway,
    sample,
    texts,
    wait_sent,
    wait_until,
)

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


async def test_a_bare_mention_in_a_group_is_answered_with_help_and_runs_nothing(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env) as (app, _client):
        bare = mention(730041001, GROUP_CHAT, ADA, "")
        assert bare["message"]["text"].strip() == f"@{BOT_NAME}"
        assert await post(app.port, bare) == 200
        (answer,) = await wait_sent(fake, GROUP, "/new")
        assert "this thread is one conversation" in answer.params["text"]
        # a message sent after it is run, and is the first run: the bare mention ran nothing
        assert (
            await post(app.port, mention(730041002, GROUP_CHAT, ADA, "and now a question")) == 200
        )
        await wait_sent(fake, GROUP, "and now a question")
        await wait_until(
            lambda: sample(app, "jazz_bridge_runs_total", outcome="ok") == 1, 20, "one run"
        )
        assert not [t for t in texts(fake, GROUP) if f"@{BOT_NAME}" in t]
