"""A file captioned with a command is not silently dropped.

``/new`` as a photo's or document's caption started the fresh conversation and left the
file unread, with no word; ``/status`` (or ``/stop``, ``/help``) with a file answered the
command and dropped the file the same way. Now a file captioned ``/new`` is the fresh
conversation's first message (as ``/new <text>`` is), and another command with a file says
that the file was not read.
"""

from __future__ import annotations

import pytest
from tg_support import ADA, FakeBotApi, post, private_chat, running_gateway, update, wait_sent

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


def document_with(update_id: int, caption: str, file_id: str, name: str) -> dict:
    body = update(update_id, private_chat(ADA), ADA, "")
    del body["message"]["text"]
    body["message"]["caption"] = caption
    body["message"]["document"] = {
        "file_id": file_id,
        "file_unique_id": f"u-{file_id}",
        "file_name": name,
    }
    return body


async def test_a_file_captioned_with_a_command_is_run_or_said_not_read(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    fake.add_file("doc-new", "documents/new.txt", b"the fresh numbers")
    fake.add_file("doc-status", "documents/status.txt", b"unread")
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, document_with(730600001, "/new", "doc-new", "fresh.txt")) == 200
        await wait_sent(fake, ADA, "Started a fresh conversation")
        (answer,) = await wait_sent(fake, ADA, "Attachments: 1", timeout=20)
        assert "fresh.txt" in answer.params["text"]

        status = document_with(730600002, "/status", "doc-status", "status.txt")
        assert await post(app.port, status) == 200
        (said,) = await wait_sent(fake, ADA, "was not read")
        assert said.params["text"].startswith("Idle: nothing is running")  # /status answered
