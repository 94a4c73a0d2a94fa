"""Operators: homes list/show from a thread key, a home path, a Slack permalink or a t.me link."""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import needs_root, remove_accounts
from gateway_harness import gateway_env, released_cli, run_cli, running_gateway

from bridge.model import Inbound, InboxState
from bridge.operators import (
    LIST_COLUMNS,
    Operators,
    cell_text,
    key_from_link,
    label,
    parse_since,
)
from bridge.store import RunOutcome, SqliteStore
from provisioning import naming
from provisioning.layout import Layout

SLACK_KEY = "slack:T0TEAM0001:C0CHAN0001:1764669600.000100"
TELEGRAM_KEY = "telegram:-1009876543210:42"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


cli = run_cli


def test_links_resolve_to_thread_key_patterns() -> None:
    assert key_from_link(
        "https://acme.slack.com/archives/C0CHAN0001/p1764669700000200?thread_ts=1764669600.000100"
    ) == ("slack", ("slack:*:C0CHAN0001:1764669600.000100",))
    assert key_from_link("https://acme.slack.com/archives/C0CHAN0001/p1764669600000100") == (
        "slack",
        ("slack:*:C0CHAN0001:1764669600.000100",),
    )
    assert key_from_link("https://acme.slack.com/archives/D0DMCHAN/p1764669800000300") == (
        "slack",
        ("slack:*:D0DMCHAN:1764669800.000300", "slack:*:D0DMCHAN"),
    )
    assert key_from_link("https://t.me/c/9876543210/42/412") == (
        "telegram",
        ("telegram:-1009876543210:42",),
    )
    assert key_from_link("https://t.me/c/987654321/77") == (
        "telegram",
        ("telegram:-100987654321", "telegram:-100987654321:*"),
    )
    assert key_from_link("https://example.com/x") is None
    with pytest.raises(ValueError, match="too far back"):
        parse_since("99999999999d")
    with pytest.raises(ValueError, match="duration like 7d"):
        parse_since("last tuesday")


async def test_list_and_show(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("ops", "hello")
        await client.wait_role("ops", "assistant")
    db = Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"
    store = SqliteStore(db)
    await store.open()
    failed = "runner exited 1"
    runs = {  # each thread's finished runs: ok, cost known, cost
        SLACK_KEY: [(True, True, 0.0125), (False, True, 0.002), (True, True, 0.0)],
        TELEGRAM_KEY: [(True, False, 0.0), (False, False, 0.0)],
    }
    for key, outcomes in runs.items():
        for n, (ok, known, cost) in enumerate(outcomes):
            message, _ = await store.accept(
                Inbound(
                    platform=key.split(":")[0],
                    event_id=f"{key}#{n}",
                    thread_key=key,
                    sender_id="u",
                    text="x",
                ),
                home=naming.home_name(key),
                is_command=False,
            )
            run = await store.begin_run(message.id, "u")
            assert run is not None
            await store.finish_run(
                run.id,
                RunOutcome(
                    ok=ok,
                    exit_code=0 if ok else 1,
                    envelope_code=None,
                    error=None if ok else failed,
                    cost_usd=cost,
                    cost_known=known,
                ),
                InboxState.DONE if ok else InboxState.FAILED,
                [],
            )
    await store.close()
    out = cli(env, "homes", "list", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert {r["threadKey"] for r in rows} == {"web:ops", SLACK_KEY, TELEGRAM_KEY}
    by_key = {r["threadKey"]: r for r in rows}
    wanted = {  # runs, failures, known cost, unpriced runs
        # the released CLI's fake is on llamacpp: its $0 is a price
        "web:ops": (1, 0, 0.0, 0 if released_cli() else 1),
        SLACK_KEY: (3, 1, 0.0145, 0),
        TELEGRAM_KEY: (2, 1, 0.0, 2),
    }
    for key, (count, failures, cost, unpriced) in wanted.items():
        row = by_key[key]
        assert (row["runs"], row["failures"], row["unpricedRuns"]) == (count, failures, unpriced)
        assert row["costUSD"] == pytest.approx(cost)
        assert row["platform"] == key.split(":")[0] and row["archived"] is False
    web = by_key["web:ops"]
    assert web["sizeBytes"] > 0

    # the table shows the same columns and values
    table = cli(env, "homes", "list")
    assert table.returncode == 0, table.stderr
    header, *lines = table.stdout.splitlines()
    labels = [label(col) for col in LIST_COLUMNS]  # named for people, the JSON's keys kept
    assert re.split(r"\s{2,}", header) == labels
    starts = []
    for name in labels:
        starts.append(header.index(name, starts[-1] + 1 if starts else 0))
    cells = [
        {
            col: line[start : (starts[i + 1] if i + 1 < len(starts) else None)].strip()
            for i, (col, start) in enumerate(zip(LIST_COLUMNS, starts, strict=True))
        }
        for line in lines
    ]
    assert {c["threadKey"] for c in cells} == set(wanted)
    for c in cells:
        row = by_key[c["threadKey"]]
        for col in LIST_COLUMNS:
            assert c[col] == cell_text(col, row[col]), (col, c, row)
        assert c["archived"] == "no" and re.fullmatch(r"\d+ B|[\d.]+ [KMG]iB", c["sizeBytes"]), c
    shown = json.loads(cli(env, "homes", "show", SLACK_KEY, "--json").stdout)
    assert sorted(r["outcome"] for r in shown["recentRuns"]) == ["failed", "ok", "ok"]
    assert failed in json.dumps(shown["recentRuns"])
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


async def test_doctor_names_a_broken_home_a_lost_account_and_a_wrong_group(
    env: dict[str, str],
) -> None:
    async with running_gateway(env) as (_, client):
        for thread in ("open", "lost", "group"):
            await client.post(thread, "hello")
            await client.wait_role(thread, "assistant")
    root = Path(env["JAZZ_BRIDGE_ROOT"])
    accounts = json.loads((root / "state" / "accounts.json").read_text())["accounts"]
    opened, lost, regrouped = (naming.home_name(f"web:{t}") for t in ("open", "lost", "group"))
    os.chmod(root / "chats" / opened, 0o777)
    lost_account = accounts[lost]["name"]
    subprocess.run(["userdel", lost_account], check=True, capture_output=True)
    other = grp.getgrnam("nogroup").gr_gid
    assert other != os.lstat(root).st_gid
    os.chown(root / "chats" / regrouped, -1, other)

    out = cli(env, "doctor")
    assert out.returncode == 1
    failed = [line for line in out.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 3, out.stdout
    [home_open] = [line for line in failed if opened in line]
    assert " 0777 " in home_open and home_open.endswith("-> run jazz-bridge repair")
    [account] = [line for line in failed if lost_account in line]
    assert f"account {lost_account} of {lost} exists" in account
    assert "jazz-bridge repair" in account.split(" -> ")[1]
    [group] = [line for line in failed if regrouped in line]
    assert f":{other} " in group and group.endswith("-> run jazz-bridge repair")
    as_json = json.loads(cli(env, "doctor", "--json").stdout)
    assert sorted(c["check"] for c in as_json if not c["ok"]) == sorted(
        line.removeprefix("FAIL ").split(" -> ")[0] for line in failed
    )

    # the fixes it names work
    repaired = cli(env, "repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    healthy = cli(env, "doctor")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert pwd.getpwnam(lost_account).pw_uid == accounts[lost]["uid"]


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


async def test_the_ops_listing_reuses_a_measured_size(
    env: dict[str, str],
) -> None:
    async with running_gateway(env) as (_, client):
        for thread in ("size-a", "size-b"):
            await client.post(thread, "hello")
            await client.wait_role(thread, "assistant")
    layout = Layout(Path(env["JAZZ_BRIDGE_ROOT"]))
    store = SqliteStore(layout.database)
    await store.open()
    try:
        cached = Operators(store, layout, os.geteuid() == 0, size_ttl_s=3600)
        fresh = Operators(store, layout, os.geteuid() == 0)  # the CLI: measured every time
        before = {r["threadKey"]: r for r in await cached.listing()}
        assert len(before) == 2
        home = Path(before["web:size-a"]["home"])
        (home / "grown.bin").write_bytes(b"x" * 200_000)
        again = {r["threadKey"]: r["sizeBytes"] for r in await cached.listing()}
        now = {r["threadKey"]: r["sizeBytes"] for r in await fresh.listing()}
        assert again["web:size-a"] == before["web:size-a"]["sizeBytes"]  # reused
        assert now["web:size-a"] >= before["web:size-a"]["sizeBytes"] + 200_000  # measured
        if os.geteuid() == 0:  # one account per home, names read from the uid map once
            assert {r["account"] for r in before.values()} != {"(none)"}
            assert len({r["account"] for r in before.values()}) == 2
    finally:
        await store.close()


async def test_a_link_finds_its_own_conversation_not_one_whose_id_starts_the_same(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "state" / "bridge.db")
    await store.open()
    try:
        keys = ("telegram:-10098765432100", "telegram:-1001234567890:42", "slack:T0TEAM:D0DMCHAN")
        for i, key in enumerate(keys):
            await store.accept(
                Inbound(
                    platform=key.split(":")[0],
                    event_id=f"e{i}",
                    thread_key=key,
                    sender_id="u",
                    text="hi",
                ),
                home=naming.home_name(key),
                is_command=False,
            )
        ops = Operators(store, Layout(tmp_path), False)

        async def found(link: str) -> str | None:
            conv = await ops.find(link)
            return conv.thread_key if conv else None

        # chat -100987654321 is not chat -10098765432100 (a prefix of its id)
        assert await found("https://t.me/c/987654321/77") is None
        # a message link without a topic: the chat's own conversation, else its one topic
        assert await found("https://t.me/c/1234567890/99") == "telegram:-1001234567890:42"
        # a DM's permalink finds the DM's conversation (its key has no thread)
        dm = "https://acme.slack.com/archives/D0DMCHAN/p1764669800000300"
        assert await found(dm) == "slack:T0TEAM:D0DMCHAN"
    finally:
        await store.close()


async def test_listing_only_reads_the_store_and_names_a_damaged_one(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("ro", "hello")
        await client.wait_role("ro", "assistant")
    state = Path(env["JAZZ_BRIDGE_ROOT"]) / "state"
    db = state / "bridge.db"
    listed = cli(env, "homes", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [r["threadKey"] for r in json.loads(listed.stdout)] == ["web:ro"]
    # damaged pages (a disk error): named, left as they are, never moved aside by a listing
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big") or 65536
    data[page:] = (b"\xde\xad\xbe\xef" * (len(data) // 4 + 1))[: len(data) - page]
    db.write_bytes(bytes(data))
    files = sorted(p.name for p in state.iterdir())
    for args in (("homes", "list"), ("homes", "show", "web:ro")):
        damaged = cli(env, *args)
        assert damaged.returncode == 2, (args, damaged.stdout, damaged.stderr)
        assert "damaged" in damaged.stderr and "Traceback" not in damaged.stderr
    assert sorted(p.name for p in state.iterdir()) == files  # nothing moved, nothing made
    assert db.read_bytes() == bytes(data)


@needs_root  # runs are isolated (and started as another account) only as root
def test_doctor_starts_the_runner_as_a_conversation_account_would(
    tmp_path: Path, fake_dir: Path
) -> None:
    """As root, doctor checks the runner as an unprivileged account with no supplementary
    groups (root reaches anything): one behind a 0700 directory, or whose ``#!``
    interpreter is, fails naming that directory; opened, it passes."""
    # fake_dir made tmp_path and its parents traversable, as a real install's would be
    env = {"JAZZ_BRIDGE_ROOT": str(tmp_path / "root"), "JAZZ_BRIDGE_ISOLATION": "auto"}
    init = cli(env, "init")
    assert init.returncode == 0, init.stdout + init.stderr
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    runner = hidden / "jazz"
    runner.write_text("#!/bin/sh\nexit 0\n")
    os.chmod(runner, 0o755)
    os.chmod(hidden, 0o700)
    shown = tmp_path / "shown"
    shown.mkdir()
    os.chmod(shown, 0o755)
    interpreted = shown / "jazz"  # reachable, but its interpreter is not
    shell = hidden / "sh"
    shell.write_bytes(Path("/bin/sh").read_bytes())
    os.chmod(shell, 0o755)
    interpreted.write_text(f"#!{shell}\nexit 0\n")
    os.chmod(interpreted, 0o755)

    for command, blocked in ((runner, runner), (interpreted, shell)):
        out = cli({**env, "JAZZ_BRIDGE_RUNNER__COMMAND": json.dumps([str(command)])}, "doctor")
        assert out.returncode == 1, out.stdout + out.stderr
        [failed] = [line for line in out.stdout.splitlines() if line.startswith("FAIL")]
        assert f"runner file {blocked} reachable" in failed, failed
        assert f"blocked at {hidden}: mode 0700" in failed, failed
        assert "move the runner outside /root and /home" in failed
        assert f"chmod o+x {hidden}" in failed
        assert not any("runner starts" in line for line in out.stdout.splitlines())

    os.chmod(hidden, 0o755)
    for command in (runner, interpreted):
        ok = cli({**env, "JAZZ_BRIDGE_RUNNER__COMMAND": json.dumps([str(command)])}, "doctor")
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert "OK   runner starts as uid 65534" in ok.stdout.splitlines(), ok.stdout


LINKS = 9

FILE_BYTES = 1024 * 1024


def _du(path: Path) -> int:
    out = subprocess.run(
        ["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[0])


async def test_a_file_with_several_names_is_counted_once(env: dict[str, str]) -> None:
    """``homes list`` says how much disk a home takes, as ``du`` would.

    A file with several names in a home (``git clone`` of a local repository hard-links its
    objects, so do ``cp -al`` and package stores) takes its blocks once; the listing counted
    them once per name, so a home holding one 1 MiB file under ten names was listed at 10 MiB,
    and the operator choosing which homes to clean up or archive chose wrong."""
    async with running_gateway(env) as (_app, client):
        await client.post("links", "hello")
        await client.wait_role("links", "assistant")
    home = Path(env["JAZZ_BRIDGE_ROOT"]) / "chats" / naming.home_name("web:links")
    repo = home / "workspace" / "clone"
    repo.mkdir()
    (repo / "pack").write_bytes(os.urandom(FILE_BYTES))
    for n in range(LINKS):
        os.link(repo / "pack", repo / f"pack-{n}")

    listed = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "homes", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["sizeBytes"] == _du(home), (row["sizeBytes"], _du(home))
