"""An approval nobody answers says why its buttons went, in Slack too.

The approval's tool name (the runner's ``toolName``) went into the prompt's heading
unclipped: with a long one the prompt filled Slack's markdown block (11,000 characters, the
gateway's clip under Slack's 12,000), and the expiry's "⌛ Expired: no answer within …; the
agent was told rejected." appended to it was cut off: the buttons vanished with a trailing
"…" and no reason.

The real gateway and Slack adapter against the fake Slack Web API; a runner of the test's
own (the run contract) asks for one approval; every wait is bounded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from accounts_support import remove_accounts
from approval_support import REASON, ask, use_approval_runner
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway, wait_until
from slack_support import event, mention, posted_ts, posts, seen, slack_env


@pytest.fixture
def env(
    tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int], slack_api: FakeSlackApi
) -> Iterator[dict[str, str]]:
    e = slack_env(tmp_path / "root", fake_dir, uid_range, slack_api)
    use_approval_runner(e, fake_dir)
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def markdown_block(call: Any) -> str:
    (block,) = [b for b in call.args.get("blocks") or [] if b.get("type") == "markdown"]
    return str(block["text"])


async def test_the_expiry_reason_of_an_approval_with_a_long_tool_name_arrives_whole(
    env: dict[str, str], slack_api: FakeSlackApi, fake_dir: Path
) -> None:
    payload = {
        "toolName": "mcp__billing__" + "apply_patch_to_the_tax_helpers_" * 300,
        "message": "Apply the patch below to the billing service. " * 30,
        "preview": "\n".join(f"-    rate = tax_rate_v1(order, {i})" for i in range(80)),
    }
    ask(fake_dir, payload)
    async with running_gateway(env) as (app, _client):
        root = "1764700000.000200"
        assert await event(app.port, mention("Ev0PATCH1", "patch it", ts=root)) == 200

        def prompt() -> list[Any]:
            return [c for c in posts(slack_api, "Approval needed") if c.args.get("blocks")]

        def settled() -> list[Any]:
            if not prompt():
                return []
            ts = posted_ts(slack_api, prompt()[0])
            return [c for c in slack_api.called("chat.update") if c.args.get("ts") == ts]

        try:
            await wait_until(
                lambda: bool(posts(slack_api, "the patch was")) and bool(settled()),
                30,
                "the agent's answer and the prompt's message settled",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the fake Slack API saw {seen(slack_api)}") from None
        assert "rejected" in str(posts(slack_api, "the patch was")[0].args.get("markdown_text"))
        assert len(prompt()) == 1
        (update,) = settled()
        text = markdown_block(update)
        assert text.rstrip().endswith(REASON), text[-200:]
        assert not [b for b in update.args["blocks"] if b.get("type") == "actions"]
