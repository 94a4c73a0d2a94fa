"""Turns as a Telegram user sees them where the core meets the Bot API: a file the Bot API
refuses for a while, a question answered by typing.

The real gateway and the real PTB client against the fake Bot API (fake_bot_api.py); every
wait is bounded.
"""

from __future__ import annotations

import pytest
from tg_support import (
    ADA,
    FakeBotApi,
    buttons,
    post,
    private_chat,
    running_gateway,
    update,
    wait_sent,
    wait_until,
)

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


async def test_a_429_on_get_file_is_waited_out_not_answered_as_a_failure(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """getFile answered 429 (retry after 1 s): the download is tried again after it, and the
    message runs with its file (it was answered "could not fetch ... flood control" and
    never run; a single 5xx or a reset connection did the same)."""
    fake.add_file("doc-1", "documents/file_1.txt", b"the quarterly numbers")
    fake.fail("getFile", "429", retry_after=1)
    document = {"file_id": "doc-1", "file_unique_id": "u-doc-1", "file_name": "numbers.txt"}
    async with running_gateway(env) as (app, _client):
        body = update(730400001, private_chat(ADA), ADA, "", document=document)
        body["message"]["caption"] = "summarize these"
        del body["message"]["text"]
        assert await post(app.port, body) == 200
        (answer,) = await wait_sent(fake, ADA, "numbers.txt", timeout=20)
        assert "flood control" not in answer.params["text"], answer.params["text"]
        assert "Attachments: 1" in answer.params["text"], answer.params["text"]


async def test_a_question_answered_by_typing_loses_its_buttons(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """A question answered by typing ("Or reply with your own answer") loses its Red / Blue
    / Skip buttons as a pressed one does (nothing pressed it, so no adapter settled it, and
    the run's end settles only prompts still pending: it kept them for good)."""
    chat = private_chat(ADA)
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, update(730500001, chat, ADA, "!ask colour?")) == 200
        (prompt,) = await wait_sent(fake, ADA, "colour?")
        assert {"Red", "Blue", "Skip"} <= set(buttons(prompt))
        prompt_id = int(prompt.result["message_id"])
        assert await post(app.port, update(730500002, chat, ADA, "green")) == 200
        await wait_sent(fake, ADA, "you answered: green")

        def settled() -> bool:
            edits = fake.called("editMessageText") + fake.called("editMessageReplyMarkup")
            return any(
                int(c.params["message_id"]) == prompt_id and "reply_markup" not in c.params
                for c in edits
            )

        await wait_until(settled, 10, "the answered question's buttons removed")
