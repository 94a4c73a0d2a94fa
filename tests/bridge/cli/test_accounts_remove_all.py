"""``jazz-bridge accounts remove-all``: every conversation account of one root leaves
``/etc/passwd``, and no other account does (not a second root's on the same host); refused
while a gateway serves the root; the homes stay, and ``repair`` (as the next ``serve``)
makes the accounts again from the root's uid map. Without root there are none to remove.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from accounts_support import OperatorGroup, needs_root, remove_accounts
from cli_support import AS_NOBODY, interpreter, reachable_by_others, run_as

Cli = Callable[..., subprocess.CompletedProcess[str]]
Serving = Callable[..., AbstractContextManager[subprocess.Popen[str]]]
Env = Callable[[Path, int, int], dict[str, str]]


@pytest.fixture
def root_env(operator_group: OperatorGroup) -> Iterator[Env]:
    """``root_env(root, uid_min, uid_max)``: an isolated root's environment; every account
    its map records is removed afterwards."""
    roots: list[Path] = []

    def make(root: Path, lo: int, hi: int) -> dict[str, str]:
        roots.append(root)
        return {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "JAZZ_BRIDGE_ROOT": str(root),
            "JAZZ_BRIDGE_ISOLATION": "on",
            "JAZZ_BRIDGE_OPERATOR_GROUP": operator_group.name,
            "JAZZ_BRIDGE_ACCOUNTS__UID_MIN": str(lo),
            "JAZZ_BRIDGE_ACCOUNTS__UID_MAX": str(hi),
        }

    yield make
    for root in roots:
        remove_accounts(root / "state" / "accounts.json")


def _accounts(tmp_path: Path, cli: Cli, env: dict[str, str], *keys: str) -> dict[str, int]:
    """Homes made for ``keys``: their account names and uids."""
    made = {}
    for key in keys:
        done = cli(tmp_path, "homes", "ensure", key, "--json", **env)
        assert done.returncode == 0, done.stderr
        home = json.loads(done.stdout)
        made[home["account"]] = home["uid"]
    return made


def _uid_of(name: str) -> int | None:
    done = subprocess.run(["getent", "passwd", name], capture_output=True, text=True)
    return int(done.stdout.split(":")[2]) if done.returncode == 0 else None


@needs_root
def test_remove_all_removes_exactly_the_roots_accounts(
    tmp_path: Path, shared_root: Path, uid_range: tuple[int, int], cli: Cli, root_env: Env
) -> None:
    lo, hi = uid_range
    mid = (lo + hi) // 2
    first = root_env(shared_root, lo, mid)
    second = root_env(tmp_path / "second", mid + 1, hi)
    mine = _accounts(tmp_path, cli, first, "web:a", "web:b")
    theirs = _accounts(tmp_path, cli, second, "web:c")

    done = cli(tmp_path, "accounts", "remove-all", **first)

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        f"removed 2 conversation account(s) of root {shared_root} (from JAZZ_BRIDGE_ROOT), "
        f"uids {lo}-{mid}:"
    ), done.stdout
    assert "their homes stay, owned by uids no account has now" in done.stdout
    assert all(_uid_of(name) is None for name in mine)
    assert {name: _uid_of(name) for name in theirs} == theirs  # the other root's stay
    homes = [p for p in (shared_root / "chats").iterdir() if not p.name.startswith(".")]
    assert {p.stat().st_uid for p in homes} == set(mine.values())  # the homes stay
    again = cli(tmp_path, "accounts", "remove-all", "--json", **first)
    assert json.loads(again.stdout)["count"] == 0

    repaired = cli(tmp_path, "repair", **first)  # as the next serve: the accounts are back
    assert repaired.returncode == 0, repaired.stderr
    assert {name: _uid_of(name) for name in mine} == mine


@needs_root
def test_remove_all_is_refused_while_serve_holds_the_root(
    tmp_path: Path,
    shared_root: Path,
    uid_range: tuple[int, int],
    cli: Cli,
    root_env: Env,
    serving: Serving,
    error_line: Callable[..., str],
) -> None:
    env = root_env(shared_root, *uid_range)
    mine = _accounts(tmp_path, cli, env, "web:a")

    with serving(tmp_path, **env):
        refused = cli(tmp_path, "accounts", "remove-all", **env)

    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert error_line(refused) == (
        "jazz-bridge: error: another jazz-bridge serve is running on this root (it holds "
        f"{shared_root / 'state' / 'gateway.lock'}); stop it first, or give this one its own root"
    )
    assert {name: _uid_of(name) for name in mine} == mine
    stopped = cli(tmp_path, "accounts", "remove-all", **env)  # serve stopped: done
    assert stopped.returncode == 0 and "removed 1 conversation account(s)" in stopped.stdout


def test_without_isolation_there_are_no_accounts_to_remove(tmp_path: Path, cli: Cli) -> None:
    assert cli(tmp_path, "homes", "ensure", "web:a").returncode == 0

    done = cli(tmp_path, "accounts", "remove-all")  # operator_env: isolation off

    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"no per-conversation accounts to remove at root {tmp_path / 'root'} (from "
        "JAZZ_BRIDGE_ROOT): isolation is off, so every conversation runs as the gateway's "
        "own account\n"
    )


@needs_root  # to become another user
def test_not_as_root_there_are_no_accounts_to_remove(tmp_path: Path) -> None:
    reachable_by_others(tmp_path)
    python, extra = interpreter(AS_NOBODY, tmp_path, "nobody")
    env = {
        "PATH": "/usr/bin:/bin",
        "JAZZ_BRIDGE_ROOT": str(tmp_path / "root"),
        "XDG_STATE_HOME": str(tmp_path / "state-home"),
        **extra,
    }

    done = run_as(AS_NOBODY, [*python, "-m", "bridge.cli", "accounts", "remove-all"], env, tmp_path)

    assert done.returncode == 0, done.stderr
    assert "no per-conversation accounts to remove" in done.stdout, done.stdout
    assert "not running as root, so every conversation runs as the gateway's own" in done.stdout
