"""A long answer in a group, which the core splits into several replies, quotes the
question once: only its first message replies to the question (``reply_parameters``); the
later ones follow it plainly, in the same forum topic.

The real gateway and PTB client against the fake Bot API (webhook); every wait bounded.
"""

from __future__ import annotations

import pytest
from tg_support import (
    ADA,
    FORUM,
    FORUM_CHAT,
    FakeBotApi,
    mention,
    post,
    running_gateway,
    sample,
    sent_to,
    wait_until,
)

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


async def test_only_the_first_part_of_a_split_answer_replies_to_the_question(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    topic = {"message_thread_id": 42, "is_topic_message": True}
    async with running_gateway(env) as (app, _client):

        async def answered() -> bool:
            return (
                sample(app, "jazz_bridge_runs_total", outcome="ok") == 1
                and not await app.store.undelivered_replies()
            )

        ask = mention(730042001, FORUM_CHAT, ADA, "!long 9000", **topic)
        assert await post(app.port, ask) == 200
        await wait_until(answered, 40, "the long answer sent")
        answer = [
            c
            for c in sent_to(fake, FORUM)
            if "Paragraph" in c.params["text"] and not c.params.get("reply_markup")
        ]
        assert len(answer) >= 3, [c.params["text"][:40] for c in answer]
        quoting = [c for c in answer if "reply_parameters" in c.params]
        assert quoting == answer[:1], [c.params.get("reply_parameters") for c in answer]
        assert answer[0].params["reply_parameters"]["message_id"] == 42001
        assert all(str(c.params.get("message_thread_id")) == "42" for c in answer)
