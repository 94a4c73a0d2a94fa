"""Review 4 (parity): the note Telegram shows the presser of a button read as raw Markdown.

The answer to a press is Markdown (``Approved `bash` (Ada)``): Slack shows it edited into
the message, the web page strips the backticks from its toast, and every Telegram message
is rendered. The Telegram toast (``answerCallbackQuery``, plain text only) showed the
backticks as typed: "Approved `write` (Ada)" after "Approve all". It is now the text as the
message shows it.

The real gateway and python-telegram-bot against the fake Bot API, the reference runner.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
from gateway_harness import running_gateway, wait_until
from tg_support import (
    ADA,
    FakeBotApi,
    buttons,
    post,
    press,
    private_chat,
    update,
    wait_sent,
)

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


async def test_the_toast_of_an_approval_reads_as_the_message_does(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    chat = private_chat(ADA)
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, update(730700001, chat, ADA, "!approve2 bash")) == 200
        (prompt,) = await wait_sent(fake, ADA, "write --pretend")
        approve_all = next(v for k, v in buttons(prompt).items() if k.startswith("Approve all"))
        assert await post(app.port, press(730700002, ADA, chat, approve_all)) == 200
        await wait_until(lambda: bool(fake.called("answerCallbackQuery")), 10, "the toast")
        (toast,) = fake.called("answerCallbackQuery")
        assert toast.params["text"] == "Approved write (Ada)", toast.params
