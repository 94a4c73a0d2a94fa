"""Review: a question asked as a reply to someone else's message.

In a group the usual way to ask the bot about a message is to reply to it with a mention:
"@bot what does this error mean?" under a colleague's log line, or "@bot what is in this
picture?" under a photo. The agent was handed only the question: the message it was about
(its text, its file) never reached the run, so the agent could only ask "which error?".
"""

from __future__ import annotations

import pytest
from telegram import Message
from tg_support import (
    ADA,
    BOT,
    BOT_NAME,
    GRACE,
    GROUP,
    GROUP_CHAT,
    FakeBotApi,
    mention,
    post,
    running_gateway,
    wait_sent,
)

from adapters.telegram import convert
from bridge.model import Inbound

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")

LOG_LINE = "deploy failed: E4711 quota exceeded on volume vol-7"


def colleague_message(**extra: object) -> dict[str, object]:
    return {
        "message_id": 6100,
        "from": {"id": ADA, "is_bot": False, "first_name": "Ada"},
        "chat": GROUP_CHAT,
        "date": 1764669600,
        **extra,
    }


async def test_a_mention_replying_to_a_colleague_hands_the_agent_that_message(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    asked = mention(
        730009501,
        GROUP_CHAT,
        GRACE,
        "what does this error mean?",
        reply_to_message=colleague_message(text=LOG_LINE),
    )
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, asked) == 200
        (answer,) = await wait_sent(fake, GROUP, "what does this error mean?")
        # the reference runner echoes its whole prompt
        assert LOG_LINE in answer.params["text"], answer.params["text"]
        assert "Ada" in answer.params["text"], "the agent is not told who wrote it"


async def test_a_mention_replying_to_a_photo_hands_the_agent_the_photo(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    photo = [{"file_id": "PHOTO-REPLIED", "file_unique_id": "uq1", "width": 8, "height": 8}]
    fake.add_file("PHOTO-REPLIED", "photos/file_1.jpg", b"\xff\xd8\xff\xe0 a jpeg")
    asked = mention(
        730009502,
        GROUP_CHAT,
        GRACE,
        "what is in this picture?",
        reply_to_message=colleague_message(photo=photo, caption="look"),
    )
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, asked) == 200
        (answer,) = await wait_sent(fake, GROUP, "what is in this picture?")
        assert "photo-uq1.jpg" in answer.params["text"], answer.params["text"]


def _message(**data: object) -> Message:
    base = {"message_id": 6200, "date": 1764669700, "chat": GROUP_CHAT}
    msg = Message.de_json({**base, **data}, None)
    assert msg is not None
    return msg


def test_a_command_replying_to_a_message_stays_a_command_and_bot_answers_are_not_requoted() -> None:
    rules = convert.Rules(BOT, BOT_NAME, frozenset(), frozenset(), True, frozenset(), "mention")
    grace = {"id": GRACE, "is_bot": False, "first_name": "Grace"}
    ada_said = colleague_message(text=LOG_LINE)
    command = _message(**{"from": grace, "text": f"/status@{BOT_NAME}"}, reply_to_message=ada_said)
    result = convert.to_inbound(1, command, rules)
    assert isinstance(result, Inbound) and result.text == "/status"
    bot = {"id": BOT, "is_bot": True, "first_name": "Jazz", "username": BOT_NAME}
    answer = {**ada_said, "from": bot, "text": "step one\nstep two\nstep three"}
    follow = _message(**{"from": grace, "text": "and then?"}, reply_to_message=answer)
    result = convert.to_inbound(2, follow, rules)
    assert isinstance(result, Inbound) and result.text == "and then?"  # in its history already
    quoting = _message(
        **{"from": grace, "text": "why this one?"},
        reply_to_message=answer,
        quote={"text": "step two", "position": 9},
    )
    result = convert.to_inbound(3, quoting, rules)
    assert isinstance(result, Inbound)
    assert result.text == "In reply to Jazz:\n> step two\n\nwhy this one?"
