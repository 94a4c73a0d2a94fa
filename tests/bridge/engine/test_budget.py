"""The daily spend cap (``limits.daily_cost_usd``): reached, or after an unpriced run, it
refuses new turns until the next UTC day; it counts what runs cost, not what never ran, and
takes no malformed or negative cost for a known one; it holds for a message that waited for
a run slot. /status and ``homes list`` show the spend (known and unpriced runs).

The real gateway in process with the bundled reference runner (its ``!cost`` sets a run's
price), a runner of the tests' own that reports the costs it is sent, or the fake runner as
the released CLI reports a paid provider's runs (unpriced); every wait is bounded.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import plain_surface
import pytest
from accounts_support import remove_accounts
from gateway_harness import (
    Client,
    gateway_env,
    install_fake_runner,
    running_gateway,
    use_reference_runner,
    wait_until,
)
from gateway_harness import run_starts as starts

from bridge.model import Attachment, Inbound, InboxState
from bridge.runner.command import shared_interpreter

LIMIT_TEXT = "Today's spending limit for this gateway is reached"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    env = gateway_env(tmp_path / "root", fake_dir, uid_range)
    use_reference_runner(env, fake_dir)
    yield env
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def said(client: Client, thread: str, text: str) -> str:
    """Wait for a line of ``thread`` containing ``text`` (progress bubbles are status too)."""
    found: list[str] = []

    async def check() -> bool:
        found[:] = [m["text"] for m in await client.messages(thread) if text in m["text"]]
        return bool(found)

    await wait_until(check, what=f"{text!r} in {thread}")
    return found[-1]


def homes_list(env: dict[str, str]) -> dict[str, dict[str, object]]:
    out = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "homes", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert out.returncode == 0, out.stderr
    return {r["threadKey"]: r for r in json.loads(out.stdout)}


def move_runs_to_yesterday(env: dict[str, str]) -> None:
    """Age today's runs by a day, as if the UTC day had turned."""
    db = Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET finished_at = finished_at - 86400")


async def test_the_cap_reached_refuses_until_the_next_day(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_LIMITS__DAILY_COST_USD"] = "0.05"
    async with running_gateway(env) as (_, client):
        await client.post("pay", "expensive !cost 0.06")
        await client.wait_role("pay", "assistant")
        await client.post("pay", "one more")
        refusal = await said(client, "pay", LIMIT_TEXT)
        assert "$0.06 spent of $0.05" in refusal and "midnight UTC" in refusal
        # another conversation is refused too: the cap is the gateway's
        await client.post("other", "hello")
        await said(client, "other", LIMIT_TEXT)
        await client.post("pay", "/status")
        status = await said(client, "pay", "Spend today")
        assert "Spend today: $0.06 of $0.05 (0 unpriced run(s))." in status
        assert len(await client.wait_role("pay", "assistant")) == 1  # nothing else ran
        # the next UTC day: runs again
        move_runs_to_yesterday(env)
        await client.post("pay", "new day")
        answers = await client.wait_role("pay", "assistant", count=2)
        assert "new day" in answers[1]["text"]
    rows = homes_list(env)
    assert rows["web:pay"]["costUSD"] == pytest.approx(0.06)
    assert rows["web:pay"]["unpricedRuns"] == 1  # "new day" ran unpriced
    assert rows["web:pay"]["runs"] == 2 and rows["web:other"]["runs"] == 0


async def test_an_unpriced_run_with_a_cap_refuses_new_turns(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_LIMITS__DAILY_COST_USD"] = "100"
    async with running_gateway(env) as (_, client):
        await client.post("free", "no price on this one")
        await client.wait_role("free", "assistant")
        await client.post("free", "and this")
        refusal = await said(client, "free", LIMIT_TEXT)
        assert "had no price" in refusal
        await client.post("free", "/status")
        status = await said(client, "free", "Spend today")
        assert "Spend today: $0.00 of $100.00 (1 unpriced run(s))." in status
    rows = homes_list(env)
    assert rows["web:free"]["unpricedRuns"] == 1 and rows["web:free"]["costUSD"] == 0


async def test_without_a_cap_unpriced_runs_go_on(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("nocap", "one")
        await client.wait_role("nocap", "assistant")
        await client.post("nocap", "two !cost 5")
        await client.wait_role("nocap", "assistant", count=2)
        await client.post("nocap", "/status")
        status = await said(client, "nocap", "Runs in flight across the gateway")
        assert "Spend today" not in status
    rows = homes_list(env)
    assert rows["web:nocap"]["costUSD"] == pytest.approx(5.0)
    assert rows["web:nocap"]["unpricedRuns"] == 1


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


# -- what a runner says a run cost -----------------------------------------------------------


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


async def shows(client: Client, thread: str, text: str) -> bool:
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
                await shows(client, "spend", LIMIT_TEXT)
                or len([m for m in await client.messages("spend") if m["role"] == "assistant"]) >= 2
            )

        await wait_until(settled, 20, "the second message answered or refused")
        assert await shows(client, "spend", LIMIT_TEXT), "ran on after a cost nobody knows"


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
                await shows(client, "neg", LIMIT_TEXT)
                or len([m for m in await client.messages("neg") if m["role"] == "assistant"]) >= 2
            )

        await wait_until(settled, 20, "the second message answered or refused")
        assert await shows(client, "neg", LIMIT_TEXT), "a negative cost lifted the cap"


# -- a message that waited for a run slot ----------------------------------------------------


def inbound(event_id: str, thread: str, text: str) -> Inbound:
    return Inbound(
        platform="plain", event_id=event_id, thread_key=thread, sender_id="u1", text=text
    )


async def test_a_message_that_waited_for_a_run_slot_is_refused_once_the_cap_is_reached(
    env: dict[str, str], fake_dir: Path
) -> None:
    """The daily cost cap holds for a message that waited for a run slot.

    A message that waits for one of ``limits.max_concurrent_runs`` (a busy gateway) was checked
    against the cap before it waited, never after: a run that finished meanwhile and took the
    day's spend over the cap (or left it unknown) did not stop it, so every conversation
    waiting for a slot ran once more, each paid for, after the cap was reached."""
    env.update(install_fake_runner(fake_dir, provider="openai"))  # its runs are unpriced
    env["JAZZ_BRIDGE_ISOLATION"] = "off"  # one account for every conversation
    env["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "1"
    env["JAZZ_BRIDGE_LIMITS__DAILY_COST_USD"] = "100"
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None and app.store is not None
        # the fake runner reports no price: once it ends, today's spend is unknown (the
        # cap closes the gateway until midnight UTC, as the README says)
        await gw.submit(inbound("a1", "plain:a", "hold a"))
        await wait_until(lambda: len(starts(fake_dir)) == 1, 20, "the first run")
        waiting = await gw.submit(inbound("b1", "plain:b", "hello from b"))
        await wait_until(
            lambda: any("limit; yours starts" in t for t in surface.texts()),
            20,
            "b told it waits for a run slot",
        )
        (fake_dir / "release-a").touch()

        async def b_closed() -> bool:
            msg = await app.store.get_message(waiting.message_id or 0)
            return msg is not None and msg.state not in (InboxState.ACCEPTED, InboxState.RUNNING)

        await wait_until(b_closed, 20, "b answered")
        await wait_until(
            lambda: any(LIMIT_TEXT in t or "hello from b" in t for t in surface.texts()),
            20,
            "b's reply",
        )
        prompts = [s["prompt"] for s in starts(fake_dir)]
        assert "hello from b" not in prompts, (
            "a message run after the day's spend had become unknown (cap reached): "
            f"{surface.texts()}"
        )
        assert any(LIMIT_TEXT in t for t in surface.texts()), surface.texts()
