"""An approval nobody answers says why its buttons went, in one Telegram message.

An approval's message (up to 1500 characters) and its preview (up to 2500) filled nearly
all of Telegram's 4096 UTF-16 units. When nobody answered, the settled text ("⌛ Expired:
no answer within …; the agent was told rejected.") was appended and cut off by the edit's
one-message limit: the buttons vanished with a trailing "…" and no reason. A preview with
emoji (two units each) made the prompt itself two messages, the buttons on the second, and
the expiry's edit overwrote that second one with the prompt's beginning.

The real gateway and Telegram adapter against the fake Bot API; a runner of the test's own
(the run contract) asks for one approval with the message and preview given; every wait is
bounded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from accounts_support import remove_accounts
from approval_support import REASON, ask, use_approval_runner
from gateway_harness import running_gateway, wait_until
from tg_support import ADA, FakeBotApi, post, private_chat, telegram_env, update, utf16

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")

# what the prompt's messages hold (its header, the previews' lines)
MARKS = ("Approval needed", "tax_rate_v1", "print('")
MESSAGE = ("Apply the patch below to the billing service; it renames the tax helpers. " * 21)[:1500]


@pytest.fixture
def env(
    tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int], bot_api: FakeBotApi
) -> Iterator[dict[str, str]]:
    e = telegram_env(tmp_path / "root", fake_dir, uid_range, bot_api)
    use_approval_runner(e, fake_dir)
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def ask_patch(fake_dir: Path, message: str, preview: str) -> None:
    ask(fake_dir, {"toolName": "apply_patch", "message": message, "preview": preview})


async def expire_unanswered(env: dict[str, str], fake: FakeBotApi) -> dict[str, Any]:
    """Ask, let the approval expire unanswered; what Telegram shows of it afterwards."""
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, update(731100001, private_chat(ADA), ADA, "patch it")) == 200

        def sent(contains: str) -> list[Any]:
            return [
                c
                for c in fake.called("sendMessage")
                if int(c.params["chat_id"]) == ADA and contains in str(c.params.get("text"))
            ]

        def prompt_msgs() -> list[Any]:
            return [c for c in sent("") if any(m in c.params["text"] for m in MARKS)]

        def settled() -> list[Any]:
            ids = {c.result["message_id"] for c in prompt_msgs()}
            return [
                c
                for c in fake.called("editMessageText")
                if int(c.params["chat_id"]) == ADA and int(c.params["message_id"]) in ids
            ]

        await wait_until(
            lambda: bool(sent("the patch was")) and bool(settled()),
            30,
            "the agent's answer and the prompt's message settled",
        )
        answer = sent("the patch was")[0]
        return {"answer": answer, "prompt": prompt_msgs(), "edits": settled()}


async def test_the_expiry_reason_of_a_full_approval_arrives_whole(
    env: dict[str, str], bot_api: FakeBotApi, fake_dir: Path
) -> None:
    preview = "\n".join(f"-    rate = tax_rate_v1(order, {i})" for i in range(80))[:2500]
    ask_patch(fake_dir, MESSAGE, preview)
    seen = await expire_unanswered(env, bot_api)
    assert "rejected" in seen["answer"].params["text"]
    assert len(seen["prompt"]) == 1, [c.params["text"][:60] for c in seen["prompt"]]
    (edit,) = seen["edits"]
    text = edit.params["text"]
    assert utf16(text) <= 4096
    assert text.rstrip().endswith(REASON), text[-200:]
    assert "reply_markup" not in edit.params


async def test_an_approval_with_emoji_is_one_message_and_its_expiry_edits_it(
    env: dict[str, str], bot_api: FakeBotApi, fake_dir: Path
) -> None:
    preview = "\n".join(f"+    print('🧾✅ total {i} 🎉🎉🎉')" for i in range(100))[:2500]
    ask_patch(fake_dir, MESSAGE, preview)
    seen = await expire_unanswered(env, bot_api)
    prompt = seen["prompt"]
    # one message, the buttons on it (it was two, the buttons under the preview's end)
    assert len(prompt) == 1, [c.params["text"][:60] for c in prompt]
    assert prompt[0].params["text"].startswith("Approval needed")
    assert prompt[0].params.get("reply_markup"), prompt[0].params
    assert all(utf16(c.params["text"]) <= 4096 for c in prompt)
    # the expiry edits that message: the prompt's beginning where it was, the reason whole
    (edit,) = seen["edits"]
    assert int(edit.params["message_id"]) == prompt[0].result["message_id"]
    text = edit.params["text"]
    assert text.startswith("Approval needed") and utf16(text) <= 4096
    assert text.rstrip().endswith(REASON), text[-200:]
