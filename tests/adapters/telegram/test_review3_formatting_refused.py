"""An answer whose formatting Telegram refuses still arrives, links included.

Telegram caps the total size of a message's entities (a text_link's URL counts), and
refuses a link-heavy message with 400 "entities too long" well before 4096 characters.
The plain-text fallback only knew "can't parse entities": this refusal was permanent, so
the answer (or the rest of a long one) was lost.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fake_bot_api import Failure, FakeBotApi
from telegram import Bot

from adapters.telegram.surface import TelegramSurface
from adapters.telegram.transport import AiohttpRequest
from bridge.markdown import split_markdown
from bridge.model import Outgoing, ReplyKind, ReplyTarget

TOKEN = "999999999:AAreview3-formatting"
CHAT = 111
TARGET = ReplyTarget("telegram", f"telegram:{CHAT}", {"chat_id": CHAT})
TOO_LONG = {"ok": False, "error_code": 400, "description": "Bad Request: entities too long"}


@pytest.fixture
async def surface() -> AsyncIterator[tuple[TelegramSurface, FakeBotApi]]:
    fake = FakeBotApi(TOKEN)
    await fake.start()
    bot = Bot(
        TOKEN,
        base_url=fake.api_url,
        request=AiohttpRequest(pool_size=4),
        get_updates_request=AiohttpRequest(pool_size=1),
    )
    await bot.initialize()
    s = TelegramSurface(bot, min_interval_s=0.0)
    try:
        yield s, fake
    finally:
        await s.close()
        await bot.shutdown()
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
    pieces = split_markdown(body, s.capabilities.max_length - 16)
    assert len(pieces) > 1
    for i, piece in enumerate(pieces):
        refuse_once(fake)
        await s.send(TARGET, Outgoing(ReplyKind.ANSWER, piece), reply_key=f"answer:2:{i}")
    shown = "\n".join(c.params["text"] for c in fake.called("sendMessage"))
    found = [shown.find(url(i)) for i in range(60)]
    assert -1 not in found and found == sorted(found)
    assert len(fake.called("sendMessage", ok=False)) == len(pieces)
