"""Spend: limits.daily_cost_usd refuses new turns when reached or after an unpriced run, until
the next UTC day; /status and ``homes list`` show the spend (known and unpriced runs)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from gateway_harness import Client, gateway_env, running_gateway, use_reference_runner, wait_until

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
