"""An answer holding half a surrogate pair still reaches Telegram.

The runner's envelope is JSON, and JSON can carry a lone surrogate (``"\\ud83d"``): a
runner written in JavaScript that cuts its answer between the two halves of an emoji
prints exactly that. The store keeps it (as a JSON escape), but the Telegram surface's
rendering could not encode it: an exception no delivery code expects, so the answer was
never sent, nor marked failed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from telegram import Bot
from tg_support import (
    ADA,
    TOKEN,
    FakeBotApi,
    buttons,
    post,
    private_chat,
    running_gateway,
    update,
    wait_sent,
)

from adapters.telegram.surface import TelegramSurface
from adapters.telegram.transport import AiohttpRequest
from bridge.model import Choice, Outgoing, ReplyKind, ReplyTarget
from bridge.runner.command import shared_interpreter

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")

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
