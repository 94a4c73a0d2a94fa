"""What /metrics counts (``bridge/metrics.py``): its label values come from a fixed set,
never from a runner's output, and a wrong or missing token on the web API's reading routes
is counted with the other auth failures.

The real gateway in process, the web chat, the fake runner or a runner of the test's own;
every wait is bounded.
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
from prometheus_client.parser import text_string_to_metric_families

from bridge.runner.command import shared_interpreter

TOKEN = "metrics-web-token-0123456789"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


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


async def test_run_outcome_labels_stay_a_fixed_set(env: dict[str, str], fake_dir: Path) -> None:
    """/metrics label values come from a fixed set, never from a runner's output.

    ``jazz_bridge_runs{outcome=...}`` was labelled with the envelope's ``code`` as the runner
    printed it (``label = "ok" if result.ok else (result.code or "failed")``;
    bridge/runner/envelope.py takes any string). docs/runner-contract.md lists five failure codes,
    but nothing holds the runner to them: a runner (a newer jazz, a wrapper, a misbehaving or
    hostile one) that puts detail into ``code`` makes one time series per distinct text, of
    any length, forever (Prometheus cardinality explosion; a scrape that grows per run)."""
    runner = fake_dir / "detail_runner.py"
    runner.write_text(RUNNER)
    os.chmod(runner, 0o755)
    env["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps([shared_interpreter(), str(runner)])
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


async def test_wrong_or_missing_token_on_the_reading_routes_is_counted(
    env: dict[str, str],
) -> None:
    """README "HTTP": /metrics counts auth failures, and the web API's token guards every
    route of it. A wrong or missing token on the reading routes (GET .../messages, the event
    stream) was refused (401) but not counted, so an operator watching
    ``jazz_bridge_auth_failures_total`` saw nobody guessing the token there."""
    env["JAZZ_BRIDGE_WEB__TOKEN"] = TOKEN
    async with running_gateway(env) as (_app, client):
        wrong = {"Authorization": "Bearer not-the-token"}
        for path in ("/api/threads/t1/messages", "/api/threads/t1/events"):
            for headers in ({}, wrong):
                async with client.session.get(client.base + path, headers=headers) as r:
                    assert r.status == 401, path
        ok = {"Authorization": f"Bearer {TOKEN}"}
        async with client.session.get(client.base + "/api/threads/t1/messages", headers=ok) as r:
            assert r.status == 200
        async with client.session.get(client.base + "/metrics") as r:
            text = await r.text()
    counted = {
        s.labels["reason"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "jazz_bridge_auth_failures_total" and s.labels["platform"] == "web"
    }
    assert counted == {"token": 4}
