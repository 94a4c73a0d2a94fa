"""Review: prompts on a surface with buttons; typed answers are what the person typed."""

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
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_a_typed_number_answers_a_free_question_shown_with_buttons(
    env: dict[str, str],
) -> None:
    """The web chat shows the question with buttons (Red, Blue, Skip) and "or reply with
    your own answer"; no numbers are shown. Asked "how many replicas?", the person types
    "3": the agent must get "3", not a silent Skip (choice number 3)."""
    async with running_gateway(env) as (_, client):
        await client.post("q", "!ask how many replicas?")
        prompt = (await client.wait_role("q", "prompt"))[0]
        assert prompt["choices"], "the web chat shows buttons"
        assert "**3**" not in prompt["text"]  # nothing tells the person 3 means Skip
        await client.post("q", "3")
        answer = (await client.wait_role("q", "assistant"))[0]["text"]
        assert "you answered: 3" in answer, answer
