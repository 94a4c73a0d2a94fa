"""How an answer's text reaches Telegram: split as the core splits it, each part sent
once, whatever Telegram makes of its formatting or its characters.

* A long answer in a group, which the core splits into several replies, quotes the
  question once: only its first message replies to the question (``reply_parameters``);
  the later ones follow it plainly, in the same forum topic.
* An answer whose formatting Telegram refuses still arrives, links included. Telegram caps
  the total size of a message's entities (a text_link's URL counts), and refuses a
  link-heavy message with 400 "entities too long" well before 4096 characters. The
  plain-text fallback only knew "can't parse entities": this refusal was permanent, so the
  answer (or the rest of a long one) was lost.
* An answer holding half a surrogate pair still reaches Telegram. The runner's envelope is
  JSON, and JSON can carry a lone surrogate (``"\\ud83d"``): a runner written in JavaScript
  that cuts its answer between the two halves of an emoji prints exactly that. The store
  keeps it (as a JSON escape), but the Telegram surface's rendering could not encode it: an
  exception no delivery code expects, so the answer was never sent, nor marked failed.

The real gateway and PTB client against the fake Bot API (webhook); every wait bounded.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fake_bot_api import Failure
from telegram import Bot
from tg_support import (
    ADA,
    FORUM,
    FORUM_CHAT,
    TOKEN,
    FakeBotApi,
    buttons,
    mention,
    post,
    private_chat,
    running_gateway,
    sample,
    sent_to,
    surface_on,
    update,
    wait_sent,
    wait_until,
)

from adapters.telegram.surface import TelegramSurface
from adapters.telegram.transport import AiohttpRequest
from bridge.markdown import split_markdown
from bridge.model import Choice, Outgoing, ReplyKind, ReplyTarget
from bridge.runner.command import shared_interpreter

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")

REFUSING_TOKEN = "999999999:AAreview3-formatting"
CHAT = 111
TARGET = ReplyTarget("telegram", f"telegram:{CHAT}", {"chat_id": CHAT})
TOO_LONG = {"ok": False, "error_code": 400, "description": "Bad Request: entities too long"}


# -- a split answer in a forum topic ------------------------------------------------------


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


# -- formatting Telegram refuses ---------------------------------------------------------


@pytest.fixture
async def surface() -> AsyncIterator[tuple[TelegramSurface, FakeBotApi]]:
    fake = FakeBotApi(REFUSING_TOKEN)
    await fake.start()
    try:
        async with surface_on(fake) as s:
            yield s, fake
    finally:
        await fake.stop()


def url(i: int) -> str:
    return f"https://shop.example/item/{i}?ref=" + "x" * 150


def refuse_once(fake: FakeBotApi, when: object = None) -> None:
    def matches(params: dict[str, object]) -> bool:
        return bool(params.get("entities")) and (when is None or str(when) in str(params["text"]))

    fake.failures.append(Failure("sendMessage", 400, TOO_LONG, matches))


async def test_a_link_heavy_answer_refused_for_its_entities_arrives_as_text(
    surface: tuple[TelegramSurface, FakeBotApi],
) -> None:
    s, fake = surface
    text = "Found these:\n\n" + "\n".join(f"- [item {i}]({url(i)})" for i in range(20))
    refuse_once(fake)
    await s.send(TARGET, Outgoing(ReplyKind.ANSWER, text), reply_key="answer:1:0")
    (sent,) = fake.called("sendMessage")
    assert "entities" not in sent.params and url(19) in sent.params["text"]


async def test_every_part_of_a_long_link_heavy_answer_arrives_in_order_with_its_links(
    surface: tuple[TelegramSurface, FakeBotApi],
) -> None:
    """Split as the core splits an answer (one reply each), every part refused once."""
    s, fake = surface
    body = "Found these:\n\n" + "\n".join(f"- [item {i}]({url(i)})" for i in range(60))
    pieces = split_markdown(body, s.capabilities.max_length - 16, s.capabilities.length_unit)
    assert len(pieces) > 1
    for i, piece in enumerate(pieces):
        refuse_once(fake)
        await s.send(TARGET, Outgoing(ReplyKind.ANSWER, piece), reply_key=f"answer:2:{i}")
    shown = "\n".join(c.params["text"] for c in fake.called("sendMessage"))
    found = [shown.find(url(i)) for i in range(60)]
    assert -1 not in found and found == sorted(found)
    assert len(fake.called("sendMessage", ok=False)) == len(pieces)


# -- half a surrogate pair ---------------------------------------------------------------

# a runner of this test's own: the contract's stdin line in, one envelope out
CUT_RUNNER = r"""
import json, sys
sys.stdin.readline()
answer = "The list, cut short: \\ud83d"
print('{"ok": true, "answer": "' + answer + '", "costUSD": 0, "costKnown": false, '
      '"tokenUsage": {"promptTokens": 1, "completionTokens": 1, "totalTokens": 2}, '
      '"toolCalls": [], "artifacts": []}', flush=True)
"""


def use_cut_runner(env: dict[str, str], fake_dir: Path) -> None:
    runner = fake_dir / "cut_runner.py"
    runner.write_text(CUT_RUNNER)
    os.chmod(runner, 0o755)
    env["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps([shared_interpreter(), str(runner)])


async def test_an_answer_cut_between_the_halves_of_an_emoji_is_delivered(
    env: dict[str, str], fake_dir: Path, fake: FakeBotApi
) -> None:
    use_cut_runner(env, fake_dir)
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, update(731000100, private_chat(ADA), ADA, "list")) == 200
        (answer,) = await wait_sent(fake, ADA, "cut short", timeout=30)
        assert answer.params["text"].startswith("The list, cut short: \ufffd")


async def test_an_edit_and_a_button_label_with_half_a_pair_go_out(fake: FakeBotApi) -> None:
    bot = Bot(TOKEN, base_url=fake.api_url, request=AiohttpRequest(pool_size=2))
    await bot.initialize()
    s = TelegramSurface(bot, min_interval_s=0.0)
    target = ReplyTarget("telegram", f"telegram:{ADA}", {"chat_id": ADA})
    try:
        ask = Outgoing(ReplyKind.PROMPT, "Pick one", choices=(Choice("t:s0", "tea \ud83c"),))
        ref = await s.send(target, ask, reply_key="prompt:1")
        await s.edit(target, ref, Outgoing(ReplyKind.NOTICE, "\ud83d\ude00 done \udc00"))
    finally:
        await s.close()
        await bot.shutdown()
    (sent,) = fake.called("sendMessage")
    assert buttons(sent) == {"tea \ufffd": "t:s0"}
    (edit,) = fake.called("editMessageText")
    assert edit.params["text"] == "\U0001f600 done \ufffd"
