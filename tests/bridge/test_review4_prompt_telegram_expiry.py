"""Review: an approval nobody answers must say why its buttons went, in one Telegram message.

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

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from accounts_support import remove_accounts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "adapters" / "telegram"))
from approval_support import REASON, ask, use_approval_runner
from gateway_harness import running_gateway, wait_until
from tg_support import ADA, TOKEN, FakeBotApi, post, private_chat, telegram_env, update, utf16

from bridge.store import PromptRecord

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")

# what the prompt's messages hold (its header, the previews' lines)
MARKS = ("Approval needed", "tax_rate_v1", "print('")
MESSAGE = ("Apply the patch below to the billing service; it renames the tax helpers. " * 21)[:1500]


@pytest.fixture
async def fake() -> AsyncIterator[FakeBotApi]:
    api = FakeBotApi(TOKEN)
    await api.start()
    yield api
    await api.stop()


@pytest.fixture
def env(
    tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int], fake: FakeBotApi
) -> Iterator[dict[str, str]]:
    e = telegram_env(tmp_path / "root", fake_dir, uid_range, fake)
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
    env: dict[str, str], fake: FakeBotApi, fake_dir: Path
) -> None:
    preview = "\n".join(f"-    rate = tax_rate_v1(order, {i})" for i in range(80))[:2500]
    ask_patch(fake_dir, MESSAGE, preview)
    seen = await expire_unanswered(env, fake)
    assert "rejected" in seen["answer"].params["text"]
    assert len(seen["prompt"]) == 1, [c.params["text"][:60] for c in seen["prompt"]]
    (edit,) = seen["edits"]
    text = edit.params["text"]
    assert utf16(text) <= 4096
    assert text.rstrip().endswith(REASON), text[-200:]
    assert "reply_markup" not in edit.params


async def test_an_approval_with_emoji_is_one_message_and_its_expiry_edits_it(
    env: dict[str, str], fake: FakeBotApi, fake_dir: Path
) -> None:
    preview = "\n".join(f"+    print('🧾✅ total {i} 🎉🎉🎉')" for i in range(100))[:2500]
    ask_patch(fake_dir, MESSAGE, preview)
    seen = await expire_unanswered(env, fake)
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


def test_a_settled_prompt_fits_every_surface() -> None:
    """A prompt at its longest, with its longest settled line, in UTF-16 units (at least
    what Slack and the web count), is within the max_length of the surface it is shown on:
    the room comes from the surface, not from one platform's limit in the core."""
    from adapters.slack.surface import SlackSurface
    from adapters.telegram.surface import TelegramSurface
    from adapters.web.adapter import WebSurface
    from bridge.engine import prompts

    record = PromptRecord(
        token="t" * 16,
        run_id=1,
        conversation_id=1,
        requester="u",
        kind="approval",
        request_id="r",
        payload={"toolName": "write_file", "message": "m😀" * 5000, "preview": "p😀" * 5000},
    )
    for surface in (TelegramSurface, SlackSurface, WebSurface):
        room = surface.capabilities.max_length
        settled = prompts.unanswered_text(record, 999_999_999 * 60, room)
        assert utf16(settled) <= room, (surface.name, utf16(settled))
        assert utf16(prompts.expired_text(record, room)) <= room, surface.name
