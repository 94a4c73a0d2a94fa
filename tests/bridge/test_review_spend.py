"""Review: the daily spend cap must count what runs cost, not what never ran, and must not
take a runner's malformed or negative cost for a known one."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import plain_surface
import pytest
from accounts_support import remove_accounts
from gateway_harness import Client, gateway_env, running_gateway, use_reference_runner, wait_until

from bridge.model import Attachment, Inbound
from bridge.runner.cli import shared_interpreter

LIMIT_TEXT = "Today's spending limit for this gateway is reached"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    use_reference_runner(e, fake_dir)
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_a_file_refused_before_any_run_does_not_close_the_gateway_for_the_day(
    env: dict[str, str],
) -> None:
    """A person sends a file over the size limit: no runner ever starts, nothing is spent.
    With a daily cap set, that must not make every conversation refuse new turns until
    midnight UTC as if an unpriced run had happened."""
    env["JAZZ_BRIDGE_LIMITS__DAILY_COST_USD"] = "100"
    env["JAZZ_BRIDGE_LIMITS__MAX_ATTACHMENT_BYTES"] = "1000"
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _client):
        surface = plain_surface.INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None
        big = Attachment(name="holiday.mov", size=50_000, platform_id="f1")
        await gw.submit(
            Inbound(
                platform="plain",
                event_id="e1",
                thread_key="plain:files",
                sender_id="u1",
                text="look at this",
                attachments=(big,),
            )
        )
        await wait_until(
            lambda: any("holiday.mov" in t for t in surface.texts()), 20, "the refusal of the file"
        )
        # someone else, in another conversation, just says hello
        await gw.submit(
            Inbound(
                platform="plain", event_id="e2", thread_key="plain:other", sender_id="u2", text="hi"
            )
        )
        await wait_until(
            lambda: (
                any("hi" in t and "reference" in t.lower() for t in surface.texts())
                or any(LIMIT_TEXT in t for t in surface.texts())
            ),
            20,
            "the answer to hi (or a refusal)",
        )
        refusals = [t for t in surface.texts() if LIMIT_TEXT in t]
        assert not refusals, refusals


COST_RUNNER = r"""
import json, sys
first = json.loads(sys.stdin.readline())
spec = json.loads(first["prompt"])  # the test's message is the envelope's spend fields
env = {"ok": True, "answer": "done", "tokenUsage": {"promptTokens": 1, "completionTokens": 1,
       "totalTokens": 2}, "toolCalls": [], "artifacts": []}
env.update(spec)
print(json.dumps(env), flush=True)
"""


def use_cost_runner(env: dict[str, str], fake_dir: Path) -> None:
    runner = fake_dir / "cost_runner.py"
    runner.write_text(COST_RUNNER)
    os.chmod(runner, 0o755)
    env["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps([shared_interpreter(), str(runner)])


async def answers(client: Client, thread: str, n: int) -> None:
    await client.wait_role(thread, "assistant", n)


async def said(client: Client, thread: str, text: str) -> bool:
    return any(text in m["text"] for m in await client.messages(thread))


@pytest.mark.parametrize(
    "spend",
    [
        {"costUSD": "7.50", "costKnown": True},  # a number as a string
        {"costKnown": True},  # no cost at all, yet "known"
    ],
    ids=["string-cost", "missing-cost"],
)
async def test_a_cost_that_is_not_a_number_is_not_a_known_zero(
    env: dict[str, str], fake_dir: Path, spend: dict[str, object]
) -> None:
    """A runner says costKnown but gives no usable costUSD: the spend is unknown, which the
    cap treats as "refuse until midnight"; recording it as a known $0 lets runs go on
    without limit."""
    use_cost_runner(env, fake_dir)
    env["JAZZ_BRIDGE_LIMITS__DAILY_COST_USD"] = "1"
    async with running_gateway(env) as (_, client):
        await client.post("spend", json.dumps(spend))
        await answers(client, "spend", 1)
        await client.post("spend", json.dumps({"costUSD": 0.01, "costKnown": True}))

        async def settled() -> bool:
            return (
                await said(client, "spend", LIMIT_TEXT)
                or len([m for m in await client.messages("spend") if m["role"] == "assistant"]) >= 2
            )

        await wait_until(settled, 20, "the second message answered or refused")
        assert await said(client, "spend", LIMIT_TEXT), "ran on after a cost nobody knows"


async def test_a_negative_cost_does_not_buy_back_the_days_budget(
    env: dict[str, str], fake_dir: Path
) -> None:
    """A runner reports costUSD -50 (a refund? a bug?): the day's known spend must not go
    below what was really spent, or the cap lets $50 more through. A negative amount is no
    price: the run counts as unpriced, and with a cap set the next message is refused."""
    use_cost_runner(env, fake_dir)
    env["JAZZ_BRIDGE_LIMITS__DAILY_COST_USD"] = "1"
    async with running_gateway(env) as (_, client):
        await client.post("neg", json.dumps({"costUSD": -50, "costKnown": True}))
        await answers(client, "neg", 1)
        await client.post("neg", json.dumps({"costUSD": 5, "costKnown": True}))

        async def settled() -> bool:
            return (
                await said(client, "neg", LIMIT_TEXT)
                or len([m for m in await client.messages("neg") if m["role"] == "assistant"]) >= 2
            )

        await wait_until(settled, 20, "the second message answered or refused")
        assert await said(client, "neg", LIMIT_TEXT), "a negative cost lifted the cap"
