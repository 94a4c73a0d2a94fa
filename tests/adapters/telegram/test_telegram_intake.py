"""Which Telegram messages are turns, and what of them reaches the agent: the real PTB client
and the real gateway against a fake Bot API. A private chat takes every message, a group
only what is addressed to the bot (a mention, a reply to it, one of its commands; with the
``all`` trigger every message), never another bot's bare command or a channel's post
forwarded into its discussion group; a forum topic is a conversation of its own; a bare
mention is answered with the help; a message sent anonymously or on behalf of a channel is
told why it gets no answer; a question asked as a reply hands the agent the message it
replies to; and the text reaches the agent as written (only a removed mention's gap tidied)."""

from __future__ import annotations

from typing import Any

import pytest
from telegram import Message
from tg_support import (
    ADA,
    BOT,
    BOT_NAME,
    FORUM,
    GRACE,
    GROUP,
    GROUP_CHAT,
    FakeBotApi,
    mention,
    post,
    private_chat,
    running_gateway,
    sample,
    sent_to,
    stored,
    texts,
    update,
    vector,
    wait_sent,
    wait_until,
)

from adapters.telegram.inbound import Rules, to_inbound
from bridge.model import Inbound, InboxState

# PTB 22 itself warns when it builds a RetryAfter (its type becomes timedelta in v23)
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


ANNOUNCEMENTS = {"id": -1005550001111, "title": "Announcements", "type": "channel"}
NEWS_CHANNEL = {"id": -1005550002222, "title": "Acme news", "type": "channel"}
TELEGRAM_SERVICE = {"id": 777000, "is_bot": False, "first_name": "Telegram"}
ANONYMOUS_ADMIN = {
    "id": 1087968824,
    "is_bot": True,
    "first_name": "Group",
    "username": "GroupAnonymousBot",
}
CHANNEL_BOT = {"id": 136817688, "is_bot": True, "first_name": "Channel", "username": "Channel_Bot"}
LOG_LINE = "deploy failed: E4711 quota exceeded on volume vol-7"


async def test_forum_topic_is_its_own_conversation_and_replies_go_to_the_topic(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, vector("forum_topic")) == 200  # /status
        (reply,) = await wait_sent(fake, FORUM, "Idle")
        assert int(reply.params["message_thread_id"]) == 42
        plain = update(
            730000100, {"id": FORUM, "type": "supergroup", "is_forum": True}, ADA, "/status"
        )
        assert await post(app.port, plain) == 200  # the General topic: another conversation
        await wait_sent(fake, FORUM, "Idle", count=2)
        keys = {m.thread_key for m in await app.store.messages_in_state(InboxState.DONE)}
        assert keys == {f"telegram:{FORUM}:42", f"telegram:{FORUM}"}
        general = [c for c in sent_to(fake, FORUM) if "message_thread_id" not in c.params]
        assert len(general) == 1


async def test_group_needs_a_mention_and_edits_are_not_turns(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env) as (app, _client):
        chatter = update(730000200, GROUP_CHAT, GRACE, "just chatting among humans")
        assert await post(app.port, chatter) == 200
        assert await post(app.port, vector("edited_message")) == 200
        other_bot = update(730000201, GROUP_CHAT, GRACE, "/status@some_other_bot")
        assert await post(app.port, other_bot) == 200
        assert (
            sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="ignored") == 3
        )
        assert await stored(app) == 0
        assert await post(app.port, vector("group_mention")) == 200
        (answer,) = await wait_sent(fake, GROUP, "check the backup logs")
        assert "@jazz_example_bot" not in answer.params["text"]
        assert answer.params["reply_parameters"]["message_id"] == 88
        command = update(730000202, GROUP_CHAT, GRACE, "/status@jazz_example_bot")
        assert await post(app.port, command) == 200
        await wait_sent(fake, GROUP, "Idle")
        # a reply to one of the bot's messages is addressed to it, without a mention
        bot_message = {
            "message_id": 5001,
            "from": {"id": BOT, "is_bot": True, "first_name": "Jazz", "username": BOT_NAME},
            "chat": GROUP_CHAT,
            "date": 1764669700,
            "text": "an earlier answer",
        }
        follow_up = update(
            730000203, GROUP_CHAT, GRACE, "and the restore logs?", reply_to_message=bot_message
        )
        assert await post(app.port, follow_up) == 200
        await wait_sent(fake, GROUP, "and the restore logs?")
        # a reply to another person is not
        human = {**bot_message, "from": {"id": ADA, "is_bot": False, "first_name": "Ada"}}
        aside = update(730000204, GROUP_CHAT, GRACE, "agreed, thanks", reply_to_message=human)
        assert await post(app.port, aside) == 200
        assert (
            sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="ignored") == 4
        )
        assert not sent_to(fake, ADA)  # the edited private message never ran
        await wait_until(
            lambda: sample(app, "jazz_bridge_runs_total", outcome="ok") == 2, 20, "two runs"
        )
        assert not [c for c in sent_to(fake, GROUP) if "agreed" in c.params["text"]]


async def test_private_chats_take_every_message_and_groups_all_with_the_all_trigger(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    env["JAZZ_BRIDGE_TELEGRAM__GROUP_TRIGGER"] = "all"
    async with running_gateway(env) as (app, _client):
        chat = vector("private_message")["message"]["chat"]
        assert await post(app.port, update(730000250, chat, ADA, "no mention here")) == 200
        await wait_sent(fake, ADA, "no mention here")
        chatter = update(730000251, GROUP_CHAT, GRACE, "plain group chatter")
        assert await post(app.port, chatter) == 200
        (answer,) = await wait_sent(fake, GROUP, "plain group chatter")
        assert answer.params["reply_parameters"]["message_id"] == 251
        other_bot = update(730000252, GROUP_CHAT, GRACE, "/status@some_other_bot")
        assert await post(app.port, other_bot) == 200  # still not for this bot
        assert (
            sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="ignored") == 1
        )


async def test_indented_code_in_a_private_message_reaches_the_agent_unchanged(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """Only the gap a removed @mention leaves is tidied: every run of two spaces anywhere
    used to become one, so Python, YAML or a Makefile sent to a coding agent lost its
    indentation, even in a private chat with no mention at all."""
    code = "Why does this fail?\n\ndef f(x):\n    if x:\n        return 1\n\treturn 2"
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, update(730100001, private_chat(ADA), ADA, code)) == 200
        await wait_sent(fake, ADA, "Why does this fail")

        async def done_texts() -> list[str]:
            return [m.text for m in await app.store.messages_in_state(InboxState.DONE)]

        async def one_done() -> bool:
            return len(await done_texts()) == 1

        await wait_until(one_done, 20, "the message recorded as done")
        assert await done_texts() == [code]


async def test_a_channel_post_forwarded_into_its_discussion_group_is_not_a_turn(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    env["JAZZ_BRIDGE_TELEGRAM__GROUP_TRIGGER"] = "all"
    forwarded = {
        "update_id": 730009200,
        "message": {
            "message_id": 901,
            "from": TELEGRAM_SERVICE,
            "sender_chat": ANNOUNCEMENTS,
            "chat": GROUP_CHAT,
            "date": 1764669660,
            "is_automatic_forward": True,
            "forward_origin": {
                "type": "channel",
                "chat": ANNOUNCEMENTS,
                "message_id": 12,
                "date": 1764669650,
            },
            "text": "New release 2.0 is out! Changelog inside.",
        },
    }
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, forwarded) == 200

        def counted() -> bool:
            labels = ("ignored", "accepted", "denied")
            return any(
                sample(app, "jazz_bridge_messages_total", platform="telegram", outcome=o) > 0
                for o in labels
            )

        await wait_until(counted, 10, "the update counted")
        assert await stored(app) == 0, "the channel's post was stored as a turn"
        assert (
            sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="ignored") == 1
        )
        assert not [c for c in fake.called("sendMessage") if int(c.params["chat_id"]) == GROUP]


async def test_a_bare_command_of_another_bot_in_a_group_is_not_a_turn(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """In a group the bot answers mentions, replies to it and commands (README). Any
    ``/word`` counts as addressed, though: ``/weather Berlin``, meant for a weather bot in the
    same group (Telegram hands a bare command to every bot that was last to speak, or that
    reads all messages), is not one of this bot's commands, so the core sends it to the agent
    as text and the group gets an agent's answer nobody asked for. Bare commands the bot
    offers (``/status``) and any command ``@jazz_example_bot`` stay addressed."""
    body = update(
        730009210,
        GROUP_CHAT,
        GRACE,
        "/weather Berlin",
        entities=[{"offset": 0, "length": 8, "type": "bot_command"}],
    )
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, body) == 200

        def counted() -> bool:
            return any(
                sample(app, "jazz_bridge_messages_total", platform="telegram", outcome=o) > 0
                for o in ("ignored", "accepted")
            )

        await wait_until(counted, 10, "the update counted")
        assert await stored(app) == 0, "another bot's command was taken as a turn"


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


def sent_as(
    update_id: int, sender: dict[str, Any], sender_chat: dict[str, Any], text: str, **extra: Any
) -> dict[str, Any]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id % 100000,
            "from": sender,
            "sender_chat": sender_chat,
            "chat": GROUP_CHAT,
            "date": 1764669660,
            "text": text,
            **extra,
        },
    }


def mentioning(text: str) -> dict[str, Any]:
    return {"entities": [{"offset": 0, "length": len(BOT_NAME) + 1, "type": "mention"}]}


async def test_an_anonymous_or_channel_sender_is_told_why_there_is_no_answer(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env) as (app, _client):
        ask = f"@{BOT_NAME} what is our uptime?"
        anonymous = sent_as(730009300, ANONYMOUS_ADMIN, GROUP_CHAT, ask, **mentioning(ask))
        assert await post(app.port, anonymous) == 200
        (told,) = await wait_sent(fake, GROUP, "anonymously")
        assert told.params["reply_parameters"]["message_id"] == 9300

        as_channel = sent_as(730009301, CHANNEL_BOT, NEWS_CHANNEL, ask, **mentioning(ask))
        assert await post(app.port, as_channel) == 200
        await wait_sent(fake, GROUP, "anonymously", count=2)

        # not addressed to the bot: nothing said
        chatter = sent_as(730009302, ANONYMOUS_ADMIN, GROUP_CHAT, "meeting at 3")
        assert await post(app.port, chatter) == 200
        labels = {"platform": "telegram", "outcome": "ignored"}
        await wait_until(
            lambda: sample(app, "jazz_bridge_messages_total", **labels) == 3, 10, "all counted"
        )
        assert await stored(app) == 0, "a message on behalf of a chat was taken as a turn"
        said = [c for c in fake.called("sendMessage") if int(c.params["chat_id"]) == GROUP]
        assert len(said) == 2, said


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
    rules = Rules(BOT, BOT_NAME, frozenset(), frozenset(), True, frozenset(), "mention")
    grace = {"id": GRACE, "is_bot": False, "first_name": "Grace"}
    ada_said = colleague_message(text=LOG_LINE)
    command = _message(**{"from": grace, "text": f"/status@{BOT_NAME}"}, reply_to_message=ada_said)
    result = to_inbound(1, command, rules)
    assert isinstance(result, Inbound) and result.text == "/status"
    bot = {"id": BOT, "is_bot": True, "first_name": "Jazz", "username": BOT_NAME}
    answer = {**ada_said, "from": bot, "text": "step one\nstep two\nstep three"}
    follow = _message(**{"from": grace, "text": "and then?"}, reply_to_message=answer)
    result = to_inbound(2, follow, rules)
    assert isinstance(result, Inbound) and result.text == "and then?"  # in its history already
    quoting = _message(
        **{"from": grace, "text": "why this one?"},
        reply_to_message=answer,
        quote={"text": "step two", "position": 9},
    )
    result = to_inbound(3, quoting, rules)
    assert isinstance(result, Inbound)
    assert result.text == "In reply to Jazz:\n> step two\n\nwhy this one?"
