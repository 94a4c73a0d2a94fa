"""``jazz-bridge homes remove``: a conversation removed for good, as root with real accounts.

Its home is archived out of the way (the tarball kept, never restored by itself) or, with
``--delete``, deleted; its account and group leave ``/etc/passwd`` and ``/etc/group``; the
thread's next home is a fresh one with a new account. A conversation with a run in
progress is refused and keeps everything.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from accounts_support import OperatorGroup, needs_root
from cli_support import add_conversation

from bridge.store import SqliteStore
from provisioning import naming

Cli = Callable[..., subprocess.CompletedProcess[str]]
KEY = "web:to-remove"


@pytest.fixture
def isolated(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> dict[str, str]:
    """The environment of an isolated root of throwaway accounts (removed afterwards)."""
    return {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "JAZZ_BRIDGE_ROOT": str(shared_root),
        "JAZZ_BRIDGE_ISOLATION": "on",
        "JAZZ_BRIDGE_OPERATOR_GROUP": operator_group.name,
        "JAZZ_BRIDGE_ACCOUNTS__UID_MIN": str(uid_range[0]),
        "JAZZ_BRIDGE_ACCOUNTS__UID_MAX": str(uid_range[1]),
    }


def _getent(db: str, name: str) -> bool:
    return subprocess.run(["getent", db, name], capture_output=True).returncode == 0


def _made(tmp_path: Path, cli: Cli, env: dict[str, str], *, state: str = "done") -> dict[str, Any]:
    """A conversation with its home (a file in it) and account; returns ``homes ensure``."""
    root = Path(env.get("JAZZ_BRIDGE_ROOT", tmp_path / "root"))  # else operator_env's
    add_conversation(root, KEY, "web", state=state)
    made = cli(tmp_path, "homes", "ensure", KEY, "--json", **env)
    assert made.returncode == 0, made.stderr
    home: dict[str, Any] = json.loads(made.stdout)
    (Path(home["path"]) / "workspace" / "notes.txt").write_text("kept\n")
    assert _getent("passwd", home["account"])
    return home


def _epoch(root: Path) -> int:
    async def go() -> int:
        store = SqliteStore(root / "state" / "bridge.db", read_only=True)
        await store.open()
        try:
            conv = await store.conversation_by_key(KEY)
            assert conv is not None
            return conv.epoch
        finally:
            await store.close()

    return asyncio.run(go())


@needs_root
def test_remove_archives_the_home_and_deletes_the_account(
    tmp_path: Path, cli: Cli, isolated: dict[str, str]
) -> None:
    root = Path(isolated["JAZZ_BRIDGE_ROOT"])
    home = _made(tmp_path, cli, isolated)

    done = cli(tmp_path, "homes", "remove", KEY, **isolated)

    assert done.returncode == 0, done.stderr
    (tarball,) = (root / "archive").glob(f"{home['name']}.removed-*.tar.gz")
    assert f"home {home['name']} archived to {tarball}" in done.stdout, done.stdout
    assert f"account {home['account']} (uid {home['uid']}) and its group deleted" in done.stdout
    assert f"removed {KEY} (root {root} (from JAZZ_BRIDGE_ROOT))" in done.stdout
    assert not Path(home["path"]).exists()
    assert not _getent("passwd", home["account"]) and not _getent("group", home["account"])
    with tarfile.open(tarball) as tar:
        assert f"{home['name']}/workspace/notes.txt" in tar.getnames()
    assert _epoch(root) == 2  # the next message: a fresh Jazz conversation
    # the thread's next home is a new, empty one (the removed tarball is not restored)
    again = cli(tmp_path, "homes", "ensure", KEY, "--json", **isolated)
    assert again.returncode == 0, again.stderr
    fresh = json.loads(again.stdout)
    assert not (Path(fresh["path"]) / "workspace" / "notes.txt").exists()
    assert tarball.exists()


@needs_root
def test_remove_delete_deletes_the_home_and_the_account(
    tmp_path: Path, cli: Cli, isolated: dict[str, str]
) -> None:
    root = Path(isolated["JAZZ_BRIDGE_ROOT"])
    home = _made(tmp_path, cli, isolated)

    done = cli(tmp_path, "homes", "remove", KEY, "--delete", "--json", **isolated)

    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["deleted"] is True and data["tarball"] is None
    assert data["account"] == home["account"] and data["uid"] == home["uid"]
    assert data["root"] == {
        "path": str(root),
        "source": "environment",
        "why": "from JAZZ_BRIDGE_ROOT",
    }
    assert not Path(home["path"]).exists()
    assert list((root / "archive").glob(f"{home['name']}*")) == []
    assert not _getent("passwd", home["account"])
    assert not any(p.name.startswith(".archived-") for p in (root / "chats").iterdir())


@needs_root
def test_remove_is_refused_while_a_run_is_in_progress(
    tmp_path: Path, cli: Cli, isolated: dict[str, str], error_line: Callable[..., str]
) -> None:
    home = _made(tmp_path, cli, isolated, state="running")

    done = cli(tmp_path, "homes", "remove", KEY, "--delete", **isolated)

    assert done.returncode == 2, done.stdout + done.stderr
    assert error_line(done) == (
        f"jazz-bridge: error: {KEY} has a run in flight; it can be removed once it is idle"
    )
    assert (Path(home["path"]) / "workspace" / "notes.txt").exists()
    assert _getent("passwd", home["account"])
    assert home["name"] == naming.home_name(KEY)


def test_remove_without_isolation_archives_the_home_and_has_no_account_to_delete(
    tmp_path: Path, cli: Cli
) -> None:
    root = tmp_path / "root"  # operator_env: isolation off, every home the gateway's own
    home = _made(tmp_path, cli, {})

    done = cli(tmp_path, "homes", "remove", KEY)

    assert done.returncode == 0, done.stderr
    (tarball,) = (root / "archive").glob(f"{home['name']}.removed-*.tar.gz")
    assert done.stdout.splitlines()[1:] == [
        f"  home {home['name']} archived to {tarball}",
        "  account: none (isolation off: it ran as the gateway's own account)",
        "  its next message starts a fresh conversation (epoch 2) in a new home",
    ]
    assert not Path(home["path"]).exists()
