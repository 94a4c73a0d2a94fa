"""A prompt nobody answers within ``limits.prompt_wait_s`` is declined for the agent.

A run waiting for a person holds one of the gateway's run slots for as long as nobody
answers (its timeout is paused): with the default four slots, four unanswered approvals
stopped every other conversation. Now the agent hears "rejected"/"declined" after the
wait, its answer arrives, the slot is free, and the prompt's buttons say it expired.

The real gateway with the web chat and the bundled reference runner (real subprocesses);
every wait is bounded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway, use_reference_runner


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    use_reference_runner(e, fake_dir)
    e["JAZZ_BRIDGE_LIMITS__PROMPT_WAIT_S"] = "1"
    e["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "1"
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_an_unanswered_approval_is_rejected_and_frees_the_slot(
    env: dict[str, str],
) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("asker", "!approve deploy")
        prompt = (await client.wait_role("asker", "prompt"))[0]
        await client.post("other", "hello from another conversation")  # waits for the slot
        answer = (await client.wait_role("asker", "assistant"))[0]["text"]
        assert "deploy was declined" in answer, answer
        other = (await client.wait_role("other", "assistant"))[0]["text"]
        assert "hello from another conversation" in other, other
        shown = [m for m in await client.messages("asker") if m["role"] == "prompt"]
        assert "⌛ expired" in shown[0]["text"] and not shown[0]["choices"], shown
        token = prompt["choices"][0]["token"]
        status, _ = await client.press("asker", token, "ada")
        assert status == 410  # expired: pressing it now changes nothing


async def test_an_unanswered_question_is_declined(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("q", "!ask favourite colour?")
        await client.wait_role("q", "prompt")
        answer = (await client.wait_role("q", "assistant"))[0]["text"]
        assert "the question was declined" in answer, answer
