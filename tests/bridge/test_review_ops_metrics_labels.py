"""Review: /metrics label values must come from a fixed set, never from a runner's output.

``jazz_bridge_runs{outcome=...}`` is labelled with the envelope's ``code`` as the runner
printed it (bridge/engine/run.py: ``label = "ok" if result.ok else (result.code or "failed")``;
bridge/runner/envelope.py takes any string). docs/runner-contract.md lists five failure codes,
but nothing holds the runner to them: a runner (a newer jazz, a wrapper, a misbehaving or
hostile one) that puts detail into ``code`` makes one time series per distinct text, of
any length, forever (Prometheus cardinality explosion; a scrape that grows per run).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway, wait_until

from bridge.runner.cli import shared_interpreter

RUNNER = r"""
import json, sys
prompt = json.loads(sys.stdin.readline())["prompt"]
sys.stdout.write(json.dumps({
    "ok": False, "code": "upstream: " + prompt, "error": "the provider said no",
    "costUSD": 0.0, "costKnown": True,
    "tokenUsage": {"promptTokens": 0, "completionTokens": 0, "totalTokens": 0},
}) + "\n")
sys.stdout.flush()
sys.exit(1)
"""

# the gateway's own codes plus the contract's (docs/runner-contract.md) and "ok"
KNOWN = {
    "ok",
    "failed",
    "empty_response",
    "no_answer",
    "content_filtered",
    "interrupted",
    "no_envelope",
    "bad_envelope",
    "timeout",
    "gateway_error",
    "answer_refused",
    "other",
}


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    env = gateway_env(tmp_path / "root", fake_dir, uid_range)
    runner = fake_dir / "detail_runner.py"
    runner.write_text(RUNNER)
    os.chmod(runner, 0o755)
    env["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps([shared_interpreter(), str(runner)])
    yield env
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_run_outcome_labels_stay_a_fixed_set(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        for i in range(4):
            await client.post(f"t{i}", f"request {i} id {'x' * 40}{i}")
        for i in range(4):
            await client.wait_role(f"t{i}", "error")

        outcomes: set[str] = set()

        async def counted() -> bool:
            async with client.session.get(f"{client.base}/metrics") as resp:
                text = await resp.text()
            outcomes.clear()
            outcomes.update(re.findall(r'^jazz_bridge_runs_total\{outcome="([^"]*)"\}', text, re.M))
            total = sum(
                float(v) for v in re.findall(r"^jazz_bridge_runs_total\{[^}]*\} (\S+)", text, re.M)
            )
            return total >= 4

        await wait_until(counted, what="4 runs counted in /metrics")
        unknown = sorted(outcomes - KNOWN)
        assert not unknown, f"{len(unknown)} outcome label(s) made from runner output: {unknown}"
