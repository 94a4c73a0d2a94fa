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


def _tree(home: Path) -> dict[str, tuple[int, int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(home):
        for name in [".", *dirnames, *filenames]:
            path = Path(dirpath) / name
            st = os.lstat(path)
            out[str(path.relative_to(home))] = (st.st_mode, st.st_uid, st.st_gid)
    return out


async def test_archive_and_restore_from_the_cli(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("arch", "hello")
        await client.wait_role("arch", "assistant")
        await client.post("busy", "hello")
        await client.wait_role("busy", "assistant")
    root = Path(env["JAZZ_BRIDGE_ROOT"])
    home = root / "chats" / naming.home_name("web:arch")
    owner = os.lstat(home).st_uid
    notes = home / "workspace" / "notes.md"
    notes.write_text("operator-visible notes\n")
    os.chown(notes, owner, os.lstat(home).st_gid)
    os.chmod(notes, 0o640)
    before = _tree(home)

    # a queued message (the gateway stopped before running it) blocks archiving
    store = SqliteStore(root / "state" / "bridge.db")
    await store.open()
    await store.accept(
        Inbound(platform="web", event_id="q1", thread_key="web:busy", sender_id="u", text="x"),
        home=naming.home_name("web:busy"),
        is_command=False,
    )
    await store.close()
    refused = cli(env, "homes", "archive", "web:busy")
    assert refused.returncode == 2
    assert "web:busy has 1 message(s) queued" in refused.stderr
    assert (root / "chats" / naming.home_name("web:busy")).is_dir()

    young = cli(env, "homes", "archive", "web:arch", "--idle-days", "1")
    assert young.returncode == 2 and "active within the last 1 days" in young.stderr
    out = cli(env, "homes", "archive", "web:arch", "--json")
    assert out.returncode == 0, out.stderr
    [row] = json.loads(out.stdout)
    assert row["archived"] and row["tarball"].endswith(".tar.gz")
    assert "archived home" in out.stderr  # noted in the log
    assert not home.exists()
    rows = {r["threadKey"]: r for r in json.loads(cli(env, "homes", "list", "--json").stdout)}
    assert rows["web:arch"]["archived"] is True
    assert rows["web:arch"]["sizeBytes"] == Path(row["tarball"]).stat().st_size
    assert rows["web:busy"]["archived"] is False and rows["web:busy"]["sizeBytes"] > 0
    again = cli(env, "homes", "archive", "web:arch")
    assert again.returncode == 2 and "already archived" in again.stderr

    # the idle sweep archives nothing busy and says so
    sweep = cli(env, "homes", "archive", "--idle-days", "0.00001", "--json")
    assert sweep.returncode == 1
    assert [(r["threadKey"], r["archived"]) for r in json.loads(sweep.stdout)] == [
        ("web:busy", False)
    ]

    restored = cli(env, "homes", "restore", "web:arch")
    assert restored.returncode == 0, restored.stderr
    assert restored.stdout.strip() == str(home)
    assert _tree(home) == before
    assert notes.read_text() == "operator-visible notes\n"
    assert not Path(row["tarball"]).exists()
    not_archived = cli(env, "homes", "restore", "web:arch")
    assert not_archived.returncode == 2 and "is not archived" in not_archived.stderr
