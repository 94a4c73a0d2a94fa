"""Review: the retention sweep deletes the runs the daily spend cap counts.

``retention.records_days`` takes fractions (``gt=0``) and ``limits.daily_cost_usd`` sums
the costs of the runs finished since midnight UTC from the ``runs`` table. With records kept
less than a day (an operator keeping little for privacy), the sweep deletes today's runs
and with them today's spend: the cap stops holding hours before midnight, and a gateway
that said "new messages run again after midnight UTC" runs them again at once.
"""

from __future__ import annotations

import time
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


async def _outcome_of(client: Client, thread: str, text: str) -> str:
    """Post ``text``; the first line after it: the refusal, or the agent's answer."""
    await client.post(thread, text)
    found: list[str] = []

    async def check() -> bool:
        lines = await client.messages(thread)
        mine = [i for i, m in enumerate(lines) if m["role"] == "user" and m["text"] == text]
        if not mine:
            return False
        after = lines[mine[-1] + 1 :]
        found[:] = [
            m["text"]
            for m in after
            if m["role"] == "assistant" or (LIMIT_TEXT in m["text"] and not m.get("live"))
        ]
        return bool(found)

    await wait_until(check, what=f"an answer or a refusal to {text!r}")
    return found[0]


async def test_a_sweep_within_the_day_does_not_reopen_the_spend_cap(
    env: dict[str, str],
) -> None:
    env["JAZZ_BRIDGE_LIMITS__DAILY_COST_USD"] = "0.05"
    env["JAZZ_BRIDGE_RETENTION__RECORDS_DAYS"] = "0.005"  # 7.2 minutes of records
    async with running_gateway(env) as (app, client):
        await client.post("pay", "expensive !cost 0.06")
        await client.wait_role("pay", "assistant")
        first = await _outcome_of(client, "pay", "one more")
        assert LIMIT_TEXT in first  # the cap holds: $0.06 spent of $0.05
        # ten minutes later, the same UTC day: the periodic sweep passes
        assert app.sweeper is not None
        report = await app.sweeper.sweep(now=time.time() + 600)
        assert app.engine is not None
        spent, _ = await app.store.cost_since(time.time() - 3600)  # type: ignore[union-attr]
        later = await _outcome_of(client, "pay", "and now?")
        assert LIMIT_TEXT in later, (
            f"after the sweep ({report['pruned']}), today's spend reads ${spent:.2f} and a "
            f"new message ran: {later!r}"
        )
