"""The Telegram adapter's pieces on their own: conversion, addressing, flood control."""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import telegramify_markdown
from telegram import Bot, Message, MessageEntity

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_bot_api import Failure, FakeBotApi
from tg_support import wait_until
from trace_support import lines_run

import adapters.telegram.render as render_module
from adapters.telegram import link_targets, mend
from adapters.telegram.inbound import Ignored, Rules, normalize_ids, to_inbound, without_mentions
from adapters.telegram.render import MAX_MESSAGE, Part, render, split_plain, utf16_len
from adapters.telegram.surface import TelegramSurface, keyboard
from bridge.model import Attachment, Choice, Inbound, Outgoing, ReplyKind, ReplyTarget
from bridge.ports import DeliveryError

# PTB 22 itself warns when it builds a RetryAfter (its type becomes timedelta in v23)
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
TOKEN = "999999999:AAunit-token"
BOT_ID = 999999999
# the modules a rendering runs in, whose lines the work is counted in
RENDERING = (render_module, mend, link_targets)
RULES = Rules(
    bot_id=BOT_ID,
    bot_username="jazz_example_bot",
    allowed_chats=normalize_ids([-100555]),
    allowed_users=normalize_ids([111, "@Grace"]),
    allow_everyone=False,
    operators=normalize_ids([111]),
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
    (part,) = render("**bold** and `code`")
    assert part.text == "bold and code"
    assert [e.type for e in part.entities] == ["bold", "code"]
    long = "\n\n".join(f"**para {i}** " + "😀" * 300 for i in range(40))
    parts = render(long)
    assert len(parts) > 1
    for p in parts:
        assert utf16_len(p.text) <= MAX_MESSAGE
        for e in p.entities:
            assert e.offset + e.length <= utf16_len(p.text)


def test_commands_for_this_bot_are_stripped_of_the_name_others_ignored() -> None:
    msg = message("/status@jazz_example_bot", GROUP, GRACE)
    result = to_inbound(1, msg, RULES)
    assert isinstance(result, Inbound) and result.text == "/status"
    other = to_inbound(2, message("/status@other_bot", GROUP, GRACE), RULES)
    assert isinstance(other, Ignored)


def test_groups_need_a_mention_or_a_reply_to_the_bot() -> None:
    plain = to_inbound(1, message("hello all", GROUP, GRACE), RULES)
    assert isinstance(plain, Ignored) and plain.outcome == "ignored"
    bot_msg = {
        "message_id": 4,
        "date": 1,
        "chat": GROUP,
        "text": "hi",
        "from": {"id": BOT_ID, "is_bot": True, "first_name": "Jazz"},
    }
    reply = to_inbound(2, message("and this?", GROUP, GRACE, reply_to_message=bot_msg), RULES)
    assert isinstance(reply, Inbound) and reply.shared_chat
    assert reply.thread_key == "telegram:-100777" and reply.target["shared"] is True


def test_allowlist_by_user_id_username_or_chat() -> None:
    assert isinstance(to_inbound(1, message("hi", PRIVATE, ADA), RULES), Inbound)
    eve = to_inbound(2, message("hi", {"id": 333, "type": "private"}, EVE), RULES)
    assert isinstance(eve, Ignored) and eve.outcome == "denied"
    grace = to_inbound(3, message("hi", {"id": 222, "type": "private"}, GRACE), RULES)
    assert isinstance(grace, Inbound) and not grace.is_operator
    chat = {"id": -100555, "type": "supergroup", "title": "allowed"}
    mention = [{"offset": 0, "length": 17, "type": "mention"}]
    ok = to_inbound(4, message("@jazz_example_bot go", chat, EVE, entities=mention), RULES)
    assert isinstance(ok, Inbound) and ok.text == "go"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("@jazz_example_bot go", "go"),
        ("hey @Jazz_Example_Bot  can you", "hey can you"),
        ("fix this  @jazz_example_bot  ", "fix this"),
        ("x @jazz_example_bot\nnext", "x\nnext"),
        ("@jazz_example_bot\n    def f():\n\treturn 1", "    def f():\n\treturn 1"),
        ("look:\n@jazz_example_bot  a  b\n    c  ", "look:\na  b\n    c  "),
        ("  a  b\n    c  ", "  a  b\n    c  "),  # no mention: the text as written
        ("mail@jazz_example_bot ok", "mail@jazz_example_bot ok"),  # not a mention
    ],
)
def test_only_the_gap_a_removed_mention_leaves_is_tidied(text: str, expected: str) -> None:
    assert without_mentions(text, RULES.bot_username) == expected


def test_the_largest_photo_and_other_media_become_attachments() -> None:
    photos = [
        {"file_id": "small", "file_unique_id": "s", "width": 90, "height": 90, "file_size": 10},
        {"file_id": "big", "file_unique_id": "b", "width": 1280, "height": 960, "file_size": 900},
    ]
    voice = {"file_id": "v1", "file_unique_id": "v", "duration": 2, "mime_type": "audio/ogg"}
    msg = message("", PRIVATE, ADA, photo=photos, voice=voice, caption="look")
    result = to_inbound(1, msg, RULES)
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
        (part,) = render(markdown)
        assert part.text == shown, (markdown, part.text)
    (code,) = render("a < b, `<code>` and é <b>bold?</b>")
    assert [(e.type, e.offset, e.length) for e in code.entities] == [("code", 7, 6)]
    (spoiler,) = render("||hidden|| and <tg-spoiler>too</tg-spoiler>")
    assert spoiler.text == "hidden and too"
    assert [e.type for e in spoiler.entities] == ["spoiler", "spoiler"]


def _shown(part: Part, entity: MessageEntity) -> str:
    """The text an entity covers (offsets are UTF-16 code units)."""
    units = part.text.encode("utf-16-le")
    return units[2 * entity.offset : 2 * (entity.offset + entity.length)].decode("utf-16-le")


def _kinds(part: Part) -> list[tuple[str, str]]:
    return [(e.type, _shown(part, e)) for e in part.entities]


def _nesting_errors(part: Part) -> list[str]:
    """What the Bot API's formatting options forbid: partial overlaps, anything inside pre
    or code, a blockquote in a blockquote, a link (or other continuous entity) containing
    anything but bold/italic/underline/strikethrough/spoiler."""
    splittable = {"bold", "italic", "underline", "strikethrough", "spoiler"}
    quotes = {"blockquote", "expandable_blockquote"}
    errors = []
    ents = list(part.entities)
    for i, outer in enumerate(ents):
        for j, inner in enumerate(ents):
            o0, o1 = outer.offset, outer.offset + outer.length
            i0, i1 = inner.offset, inner.offset + inner.length
            if i == j or i1 <= o0 or o1 <= i0:
                continue
            if not (o0 <= i0 and i1 <= o1) and not (i0 <= o0 and o1 <= i1):
                errors.append(f"{outer.type} overlaps {inner.type}")
            elif o0 <= i0 and i1 <= o1 and ((o0, o1) != (i0, i1) or i < j):
                if outer.type in {"pre", "code"}:
                    errors.append(f"{inner.type} in {outer.type}")
                elif outer.type in quotes and inner.type in quotes:
                    errors.append("a blockquote in a blockquote")
                elif outer.type not in splittable | quotes and inner.type not in splittable:
                    errors.append(f"{inner.type} in {outer.type}")
    return errors


def test_links_telegram_would_refuse_show_their_path_and_keep_the_formatting() -> None:
    """Telegram refuses a text_link to src/main.py, /etc/x or #usage ("URL host is empty")
    and the surface then resends the whole answer unformatted: such a link shows its path
    as code instead, the rest keeps its entities."""
    (part,) = render(
        "**Edit** [main.py](src/main.py), [the config](/etc/app.conf) and [anchor](#usage)"
    )
    assert part.text == "Edit src/main.py, the config (/etc/app.conf) and anchor"
    assert _kinds(part) == [("bold", "Edit"), ("code", "src/main.py"), ("code", "/etc/app.conf")]
    (note,) = render("text[^1]\n\n[^1]: note")  # no footnotes: a link to "note"
    assert note.text == "text^1 (note)"
    assert all(e.type != "text_link" for e in note.entities)
    (empty,) = render("[](https://x.com/a_b) and <ada@example.com>")
    assert empty.text == "https://x.com/a_b and ada@example.com"
    assert [(e.type, _shown(empty, e), e.url) for e in empty.entities] == [
        ("text_link", "https://x.com/a_b", "https://x.com/a_b"),
        ("text_link", "ada@example.com", "mailto:ada@example.com"),
    ]
    (web,) = render("[docs](https://example.com/docs) and [x](http://)")
    assert [(e.type, e.url) for e in web.entities] == [
        ("text_link", "https://example.com/docs"),
        ("code", None),
    ]


def test_links_in_a_table_keep_their_url_in_notes_after_it() -> None:
    """A table is sent as a code block, where a link cannot be: the link gets a number and
    its URL is listed under it after the table (in the cell, it made the table twice as
    wide, and a phone wraps every row)."""
    (part,) = render(
        "| Name | Link |\n|---|---|\n| docs | [guide](https://example.com/a_b) |\n"
        "| code | [main](src/main.py) |\n| more | [guide too](https://example.com/a_b) |\n\n"
        "After."
    )
    table, notes, after = part.text.split("\n\n")
    rows = table.split("\n")
    assert [r.split("|")[1].strip() for r in rows[2:]] == ["guide[1]", "main[2]", "guide too[1]"]
    assert max(len(r) for r in rows) == len("more | guide too[1]")
    assert notes.split("\n") == ["[1] https://example.com/a_b", "[2] src/main.py"]
    assert after == "After."
    pre, code = part.entities  # the table, then the path as code
    assert (pre.type, pre.offset, pre.length) == ("pre", 0, len(table))
    assert code.type == "code" and part.text[code.offset :][: code.length] == "src/main.py"


def test_notes_of_a_table_in_a_quote_stay_in_the_quote() -> None:
    (part,) = render("> | a | b |\n> |---|---|\n> | x | [l](https://x.y/1) |\n>\n> end")
    assert "x | l[1]" in part.text and "[1] https://x.y/1" in part.text
    (quote,) = [e for e in part.entities if e.type == "blockquote"]
    assert part.text[quote.offset :][: quote.length].endswith("[1] https://x.y/1\n\nend")


def test_text_after_a_table_or_code_in_a_list_item_starts_on_its_own_line() -> None:
    """In a list item the converter wrote the paragraph after a table onto the table's
    last row (``x | ypara after``), and after a code block onto its last line."""
    table = "| a | b |\n|---|---|\n| x | [l](https://x.y/1) |"
    item = "- item\n\n" + "\n".join(f"  {row}" for row in table.split("\n"))
    (part,) = render(item + "\n\n  para after\n- next")
    assert (
        part.text == "⦁ item\na | b   \n--+-----\nx | l[1]\n[1] https://x.y/1\npara after\n⦁ next\n"
    )
    (pre,) = part.entities
    assert part.text[pre.offset : pre.offset + pre.length].endswith("x | l[1]")  # the table
    (quoted,) = render("> 1. item\n>\n>    ```sh\n>    ls\n>    ```\n>\n>    then **this**")
    assert quoted.text == "1. item\nls\nthen this\n"
    assert {e.type for e in quoted.entities} == {"blockquote", "pre", "bold"}
    (heading,) = render("- a\n\n  ## h\n\n  b\n\n  ---\n  ===")
    assert heading.text.endswith("h\nb\n\n————————\n===\n"), heading.text
    (top,) = render(table + "\n\npara after")  # outside a list: as before
    assert top.text.endswith("x | l[1]\n\n[1] https://x.y/1\n\npara after"), top.text


def test_item_text_before_a_code_block_in_an_opening_tight_list_has_its_own_line() -> None:
    """While no block of the message had ended, the converter ran a tight item's text into
    the code block under it (``⦁ itemcode``); a paragraph before the list hid it."""
    for prefix, quote in (("", ""), ("", "> "), ("intro\n\n", "")):
        lines = ["- item", "  ```sh", "  code", "  ```", "- next"]
        (part,) = render(prefix + "\n".join(quote + line for line in lines))
        assert part.text == prefix + "⦁ item\ncode\n⦁ next\n", part.text
        (pre,) = [e for e in part.entities if e.type == "pre"]
        assert part.text[pre.offset : pre.offset + pre.length] == "code"
    (table,) = render("1. item\n   | a | b |\n   |---|---|\n   | x | y |")
    assert table.text.startswith("1. item\na | b"), table.text


def test_an_open_task_shows_an_empty_box() -> None:
    (part,) = render("- [ ] not done\n- [x] done")
    assert part.text.splitlines() == ["\N{WHITE LARGE SQUARE} not done", "✅ done"]
    # set on the adapter's own config: the converter's global one is left alone
    text, _ = telegramify_markdown.convert("- [ ] open")
    assert text.startswith("\N{BALLOT BOX WITH CHECK}")


def test_entities_nest_only_as_telegram_allows() -> None:
    """Nested quotes become one quote; code inside a link loses its code entity; what the
    rules allow (bold around code, a code block in a quote) stays."""
    (quotes,) = render("> outer\n>> inner **b**\n> back")
    assert _kinds(quotes) == [("blockquote", "outer\ninner b\nback"), ("bold", "b")]
    (link,) = render("[`code` **b**](https://x.com)")
    assert _kinds(link) == [("text_link", "code b"), ("bold", "b")]
    (mixed,) = render("**bold `code`** and **`all`**\n\n> q\n> ```py\n> x = 1\n> ```")
    assert _kinds(mixed) == [
        ("bold", "bold code"),
        ("code", "code"),
        ("code", "all"),
        ("blockquote", "q\nx = 1"),
        ("pre", "x = 1"),
    ]
    for markdown in (
        "> a\n>> b\n>>> c `d` [e](https://e.com)",
        "- [**x** `y`](src/y.py)\n  > ```\n  > z\n  > ```",
        "# Title `code` [link](https://a.b)\n\n| a |\n|---|\n| **b** |",
    ):
        for part in render(markdown):
            assert _nesting_errors(part) == [], (markdown, _kinds(part))


def test_lone_carriage_returns_are_line_breaks() -> None:
    (part,) = render("a\r```\rx\r```\rtail")
    assert part.text == "a\nx\ntail"
    assert _kinds(part) == [("pre", "x")]
    (crlf,) = render("line\r\n\r\n**bold**\r\n")
    assert crlf.text == "line\n\nbold"


def test_text_of_astral_characters_is_cut_between_words() -> None:
    """The core splits by characters; a part of astral characters (two UTF-16 units each)
    is cut again to Telegram's 4096 units, at a space, not inside a word."""
    word = "\N{MATHEMATICAL BOLD SMALL W}\N{MATHEMATICAL BOLD SMALL O}" * 3
    parts = render(" ".join([word] * 580))
    assert len(parts) == 2
    for p in parts:
        assert utf16_len(p.text) <= MAX_MESSAGE
        assert all(w == word for w in p.text.split()), p.text[-20:]
    assert [w for p in parts for w in p.text.split()] == [word] * 580
    assert split_plain("ab " * 10, 8) == ["ab ab ", "ab ab ", "ab ab ", "ab ab ", "ab ab "]


LONG_ANSWERS: dict[str, Callable[[int], str]] = {
    "code spans": lambda n: " ".join(f"`c{i}` **b{i}**" for i in range(n)),
    "a long line": lambda n: "".join(f"word `code` *em* [l](https://x.y/{i}) " for i in range(n)),
    "a nested list": lambda n: "\n".join("  " * (i % 6) + f"- item `{i}`" for i in range(n)),
    "a table": lambda n: (
        "| a | b |\n|---|---|\n" + "\n".join(f"| {i} | [l](https://x.y/{i}) |" for i in range(n))
    ),
}


@pytest.mark.parametrize("shape", LONG_ANSWERS)
def test_rendering_does_work_in_proportion_to_the_answer(shape: str) -> None:
    """Twice the answer is about twice the work, not four times: each part looked at every
    entity of the answer (a 1 MB answer of code spans took 9 s, holding the event loop)."""
    make = LONG_ANSWERS[shape]
    small, large = (
        sum(lines_run(functools.partial(render, make(n), 300), m) for m in RENDERING)
        for n in (1500, 3000)
    )
    assert large / small < 2.5, (small, large)
