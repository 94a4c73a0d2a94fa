"""Operators: homes list/show from a thread key, a home path, a Slack permalink or a t.me link."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import remove_accounts
from gateway_harness import gateway_env, running_gateway

from bridge.model import Inbound
from bridge.operators import key_from_link, parse_since
from bridge.store import SqliteStore
from provisioning import naming


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


def test_links_resolve_to_thread_key_patterns() -> None:
    assert key_from_link(
        "https://acme.slack.com/archives/C0CHAN0001/p1764669700000200?thread_ts=1764669600.000100"
    ) == ("slack", "slack:*:C0CHAN0001:1764669600.000100")
    assert key_from_link("https://acme.slack.com/archives/C0CHAN0001/p1764669600000100") == (
        "slack",
        "slack:*:C0CHAN0001:1764669600.000100",
    )
    assert key_from_link("https://t.me/c/9876543210/42/412") == (
        "telegram",
        "telegram:-1009876543210:42",
    )
    assert key_from_link("https://example.com/x") is None
    with pytest.raises(ValueError, match="duration like 7d"):
        parse_since("last tuesday")


async def test_list_and_show(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("ops", "hello")
        await client.wait_role("ops", "assistant")
    db = Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"
    store = SqliteStore(db)
    await store.open()
    for key in ("slack:T0TEAM0001:C0CHAN0001:1764669600.000100", "telegram:-1009876543210:42"):
        await store.accept(
            Inbound(
                platform=key.split(":")[0], event_id=key, thread_key=key, sender_id="u", text="x"
            ),
            home=naming.home_name(key),
            is_command=False,
        )
    await store.close()
    out = cli(env, "homes", "list", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert {r["threadKey"] for r in rows} == {
        "web:ops",
        "slack:T0TEAM0001:C0CHAN0001:1764669600.000100",
        "telegram:-1009876543210:42",
    }
    web = next(r for r in rows if r["threadKey"] == "web:ops")
    assert web["runs"] == 1 and web["failures"] == 0 and web["unpricedRuns"] == 1
    assert web["sizeBytes"] > 0
    only = json.loads(cli(env, "homes", "list", "--platform", "slack", "--json").stdout)
    assert [r["platform"] for r in only] == ["slack"]
    for ref in ("web:ops", web["home"]):
        shown = json.loads(cli(env, "homes", "show", ref, "--json").stdout)
        assert shown["threadKey"] == "web:ops"
        assert shown["recentRuns"][0]["outcome"] == "ok"
        assert shown["transcript"].endswith("/history")
    link = "https://acme.slack.com/archives/C0CHAN0001/p1764669600000100"
    assert json.loads(cli(env, "homes", "show", link, "--json").stdout)["platform"] == "slack"
    tme = "https://t.me/c/9876543210/42/412"
    assert json.loads(cli(env, "homes", "show", tme, "--json").stdout)["platform"] == "telegram"
    missing = cli(env, "homes", "show", "web:nope")
    assert missing.returncode == 2 and "no conversation matches" in missing.stderr
    path = cli(env, "homes", "path", "web:ops")
    assert path.stdout.strip() == web["home"]


async def test_doctor_passes_on_a_healthy_root_and_names_the_fix(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("doc", "hello")
        await client.wait_role("doc", "assistant")
    ok = cli(env, "doctor")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert all(line.startswith("OK") for line in ok.stdout.splitlines())
    root = Path(env["JAZZ_BRIDGE_ROOT"])
    os.chmod(root / "chats", 0o755)
    bad = cli(env, "doctor", "--json")
    assert bad.returncode == 1
    failed = [c for c in json.loads(bad.stdout) if not c["ok"]]
    assert failed and "chats" in failed[0]["check"] and "repair" in failed[0]["fix"]
