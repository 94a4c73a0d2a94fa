"""The Telegram adapter's pieces on their own: conversion, addressing, flood control."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from telegram import Bot, Message

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_bot_api import Failure, FakeBotApi
from tg_support import wait_until

from adapters.telegram import convert
from adapters.telegram.surface import TelegramSurface, keyboard
from bridge.model import Attachment, Choice, Inbound, Outgoing, ReplyKind, ReplyTarget
from bridge.ports import DeliveryError

# PTB 22 itself warns when it builds a RetryAfter (its type becomes timedelta in v23)
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
TOKEN = "999999999:AAunit-token"
BOT_ID = 999999999
RULES = convert.Rules(
    bot_id=BOT_ID,
    bot_username="jazz_example_bot",
    allowed_chats=convert.normalize_ids([-100555]),
    allowed_users=convert.normalize_ids([111, "@Grace"]),
    allow_everyone=False,
    operators=convert.normalize_ids([111]),
    group_trigger="mention",
)


def message(text: str, chat: dict[str, Any], user: dict[str, Any], **extra: Any) -> Message:
    data = {"message_id": 5, "date": 1764669600, "chat": chat, "from": user, "text": text}
    data.update(extra)
    msg = Message.de_json(data, None)
    assert msg is not None
    return msg


ADA = {"id": 111, "is_bot": False, "first_name": "Ada"}
GRACE = {"id": 222, "is_bot": False, "first_name": "Grace", "username": "grace"}
EVE = {"id": 333, "is_bot": False, "first_name": "Eve"}
PRIVATE = {"id": 111, "type": "private"}
GROUP = {"id": -100777, "type": "supergroup", "title": "G"}


def test_markdown_becomes_entities_and_long_text_is_split_under_the_limit() -> None:
    (part,) = convert.render("**bold** and `code`")
    assert part.text == "bold and code"
    assert [e.type for e in part.entities] == ["bold", "code"]
    long = "\n\n".join(f"**para {i}** " + "😀" * 300 for i in range(40))
    parts = convert.render(long)
    assert len(parts) > 1
    for p in parts:
        assert convert.utf16_len(p.text) <= convert.MAX_MESSAGE
        for e in p.entities:
            assert e.offset + e.length <= convert.utf16_len(p.text)


def test_commands_for_this_bot_are_stripped_of_the_name_others_ignored() -> None:
    msg = message("/status@jazz_example_bot", GROUP, GRACE)
    result = convert.to_inbound(1, msg, RULES)
    assert isinstance(result, Inbound) and result.text == "/status"
    other = convert.to_inbound(2, message("/status@other_bot", GROUP, GRACE), RULES)
    assert isinstance(other, convert.Ignored)


def test_groups_need_a_mention_or_a_reply_to_the_bot() -> None:
    plain = convert.to_inbound(1, message("hello all", GROUP, GRACE), RULES)
    assert isinstance(plain, convert.Ignored) and plain.outcome == "ignored"
    bot_msg = {
        "message_id": 4,
        "date": 1,
        "chat": GROUP,
        "text": "hi",
        "from": {"id": BOT_ID, "is_bot": True, "first_name": "Jazz"},
    }
    reply = convert.to_inbound(
        2, message("and this?", GROUP, GRACE, reply_to_message=bot_msg), RULES
    )
    assert isinstance(reply, Inbound) and reply.shared_chat
    assert reply.thread_key == "telegram:-100777" and reply.target["shared"] is True


def test_allowlist_by_user_id_username_or_chat() -> None:
    assert isinstance(convert.to_inbound(1, message("hi", PRIVATE, ADA), RULES), Inbound)
    eve = convert.to_inbound(2, message("hi", {"id": 333, "type": "private"}, EVE), RULES)
    assert isinstance(eve, convert.Ignored) and eve.outcome == "denied"
    grace = convert.to_inbound(3, message("hi", {"id": 222, "type": "private"}, GRACE), RULES)
    assert isinstance(grace, Inbound) and not grace.is_operator
    chat = {"id": -100555, "type": "supergroup", "title": "allowed"}
    mention = [{"offset": 0, "length": 17, "type": "mention"}]
    ok = convert.to_inbound(4, message("@jazz_example_bot go", chat, EVE, entities=mention), RULES)
    assert isinstance(ok, Inbound) and ok.text == "go"


def test_the_largest_photo_and_other_media_become_attachments() -> None:
    photos = [
        {"file_id": "small", "file_unique_id": "s", "width": 90, "height": 90, "file_size": 10},
        {"file_id": "big", "file_unique_id": "b", "width": 1280, "height": 960, "file_size": 900},
    ]
    voice = {"file_id": "v1", "file_unique_id": "v", "duration": 2, "mime_type": "audio/ogg"}
    msg = message("", PRIVATE, ADA, photo=photos, voice=voice, caption="look")
    result = convert.to_inbound(1, msg, RULES)
    assert isinstance(result, Inbound)
    assert [a.platform_id for a in result.attachments] == ["big", "v1"]
    assert result.attachments[0].media_type == "image/jpeg"


def test_callback_data_over_64_bytes_is_refused() -> None:
    assert keyboard((Choice("a" * 64, "ok"),)) is not None
    with pytest.raises(DeliveryError, match="64") as err:
        keyboard((Choice("é" * 33, "66 bytes"),))
    assert err.value.permanent


@pytest.fixture
async def surface() -> AsyncIterator[tuple[TelegramSurface, FakeBotApi]]:
    fake = FakeBotApi(TOKEN)
    await fake.start()
    bot = Bot(TOKEN, base_url=fake.api_url, base_file_url=f"http://127.0.0.1:{fake.port}/file/bot")
    await bot.initialize()
    s = TelegramSurface(bot, min_interval_s=0.3)
    try:
        yield s, fake
    finally:
        await s.close()
        await bot.shutdown()
        await fake.stop()


TARGET = ReplyTarget("telegram", "telegram:111", {"chat_id": 111})


async def test_about_one_message_a_second_per_chat(
    surface: tuple[TelegramSurface, FakeBotApi],
) -> None:
    s, fake = surface
    for i in range(3):
        await s.send(TARGET, Outgoing(ReplyKind.NOTICE, f"n{i}"), reply_key=f"k{i}")
    at = [c.at for c in fake.called("sendMessage")]
    assert len(at) == 3 and at[1] - at[0] >= 0.28 and at[2] - at[1] >= 0.28


async def test_after_a_429_edits_are_held_and_answers_wait(
    surface: tuple[TelegramSurface, FakeBotApi],
) -> None:
    s, fake = surface
    ref = await s.send(TARGET, Outgoing(ReplyKind.NOTICE, "working"), reply_key="progress:1")
    fake.fail_next("sendMessage", "429")
    with pytest.raises(DeliveryError) as err:
        await s.send(TARGET, Outgoing(ReplyKind.ANSWER, "answer"), reply_key="answer:1")
    assert err.value.retry_after == 1 and not err.value.permanent
    await s.edit(TARGET, ref, Outgoing(ReplyKind.NOTICE, "still working"))
    await s.edit(TARGET, ref, Outgoing(ReplyKind.NOTICE, "done"))
    await s.typing(TARGET)
    assert not fake.called("editMessageText") and not fake.called("sendChatAction")
    with pytest.raises(DeliveryError) as again:  # still cooling down: retried later, not lost
        await s.send(TARGET, Outgoing(ReplyKind.ANSWER, "answer"), reply_key="answer:1")
    assert 0 < again.value.retry_after <= 1
    s.cooldown_until = time.monotonic()  # the cooldown is over
    await s.send(TARGET, Outgoing(ReplyKind.ANSWER, "answer"), reply_key="answer:1")
    assert [c.params["text"] for c in fake.called("sendMessage")] == ["working", "answer"]
    # the newest held edit goes out once, the one it replaced never
    await wait_until(lambda: bool(fake.called("editMessageText")), 10, "the held edit")
    await wait_until(lambda: s._flusher is not None and s._flusher.done(), 10, "the flusher")
    assert [c.params["text"] for c in fake.called("editMessageText")] == ["done"]


async def test_a_429_on_an_edit_holds_the_newest_edit_until_the_cooldown_is_over(
    surface: tuple[TelegramSurface, FakeBotApi],
) -> None:
    s, fake = surface
    ref = await s.send(TARGET, Outgoing(ReplyKind.NOTICE, "working"), reply_key="progress:2")
    other = await s.send(TARGET, Outgoing(ReplyKind.NOTICE, "other"), reply_key="progress:3")
    fake.fail_next("editMessageText", "429", retry_after=1)
    stop = (Choice("stop-token", "Stop"),)
    with pytest.raises(DeliveryError) as err:
        await s.edit(TARGET, ref, Outgoing(ReplyKind.NOTICE, "working 2s", choices=stop))
    assert err.value.retry_after == 1
    assert s.cooling_down() > 0  # the 429 on the edit started the bot-wide cooldown
    (refused,) = fake.called("editMessageText", ok=False)
    assert refused.status == 429 and not fake.called("editMessageText")
    await s.edit(TARGET, ref, Outgoing(ReplyKind.NOTICE, "working 4s", choices=stop))
    await s.edit(TARGET, ref, Outgoing(ReplyKind.NOTICE, "✓ done"))  # the run's summary
    await s.edit(TARGET, other, Outgoing(ReplyKind.NOTICE, "other 1"))
    held_until = s.cooldown_until

    def edits() -> list[tuple[int, str]]:
        return [
            (int(c.params["message_id"]), c.params["text"]) for c in fake.called("editMessageText")
        ]

    await wait_until(lambda: len(edits()) == 2, 10, "the held edits")
    _, bubble = ref.split(":")
    _, second = other.split(":")
    assert sorted(edits()) == sorted([(int(bubble), "✓ done"), (int(second), "other 1")])
    sent = fake.called("editMessageText")
    assert all("reply_markup" not in c.params for c in sent)  # no Stop button left
    assert all(c.at >= refused.at + 0.9 for c in sent)  # waited out retry_after
    assert time.monotonic() >= held_until
    # after the cooldown an edit goes out at once, and replaces a held one for its message
    await s.edit(TARGET, ref, Outgoing(ReplyKind.NOTICE, "✓ done, again"))
    assert edits()[-1] == (int(bubble), "✓ done, again")
    assert s._flusher is not None
    await s._flusher
    assert len(edits()) == 3 and not s._held_edits


async def test_a_split_reply_never_sends_a_part_twice_on_retry(
    surface: tuple[TelegramSurface, FakeBotApi],
) -> None:
    s, fake = surface
    s.min_interval_s = 0.0
    text = "\n\n".join("x" * 3000 for _ in range(3))
    fake.fail_next("sendMessage", "429", when=lambda _p: len(fake.called("sendMessage")) == 1)
    with pytest.raises(DeliveryError):
        await s.send(TARGET, Outgoing(ReplyKind.ANSWER, text), reply_key="answer:9")
    s.cooldown_until = 0.0
    await s.send(TARGET, Outgoing(ReplyKind.ANSWER, text), reply_key="answer:9")
    assert len(fake.called("sendMessage")) == 3


async def test_chat_not_found_is_permanent_and_downloads_over_20_mb_refused(
    surface: tuple[TelegramSurface, FakeBotApi],
) -> None:
    s, fake = surface
    fake.failures.append(
        Failure(
            "sendMessage",
            400,
            {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"},
            lambda _p: True,
        )
    )
    with pytest.raises(DeliveryError) as err:
        await s.send(TARGET, Outgoing(ReplyKind.ANSWER, "hi"), reply_key="a")
    assert err.value.permanent
    big = Attachment(name="big.bin", size=21 * 1024 * 1024, platform_id="f")
    with pytest.raises(DeliveryError) as too_big:
        await s.download(big, 50 * 1024 * 1024)
    assert too_big.value.permanent and not fake.called("getFile")
    fake.add_file("f2", "documents/f2.txt", b"hello")
    data = await s.download(Attachment(name="f2.txt", platform_id="f2"), 1000)
    assert data == b"hello"


def test_text_that_looks_like_html_is_shown_as_written() -> None:
    """CommonMark reads <your-token> or Vec<u8> as HTML, which Telegram cannot show: the
    answer keeps it as text (code, spoilers and a plain "<" as before)."""
    cases = {
        "Replace <your-token> with the key; it returns Vec<u8>.": (
            "Replace <your-token> with the key; it returns Vec<u8>."
        ),
        "Add this:\n\n<dependency>\n<id>x</id>\n</dependency>\n\nThen rebuild.": (
            "Add this:\n\n<dependency>\n<id>x</id>\n</dependency>\n\nThen rebuild."
        ),
        "a < b, `<code>` and é <b>bold?</b>": "a < b, <code> and é <b>bold?</b>",
    }
    for markdown, shown in cases.items():
        (part,) = convert.render(markdown)
        assert part.text == shown, (markdown, part.text)
    (code,) = convert.render("a < b, `<code>` and é <b>bold?</b>")
    assert [(e.type, e.offset, e.length) for e in code.entities] == [("code", 7, 6)]
    (spoiler,) = convert.render("||hidden|| and <tg-spoiler>too</tg-spoiler>")
    assert spoiler.text == "hidden and too"
    assert [e.type for e in spoiler.entities] == ["spoiler", "spoiler"]
