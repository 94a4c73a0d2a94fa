"""The repair of a gateway root (``repair`` at start-up and ``jazz-bridge repair``): the
root's table of modes and owners, shallow at start and deep on demand, and the homes' deep
walk it runs (provisioning.walk, tested on its own in test_walk.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from accounts_support import OperatorGroup, needs_root
from home_support import make, mode

from provisioning.accounts import AccountRegistry
from provisioning.homes import Homes
from provisioning.layout import init_root
from provisioning.repair import repair


@needs_root
def test_entrypoint_repair_restores_the_table(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    info = init_root(shared_root, operator_group.name)
    registry = AccountRegistry(info.layout, info.operator_gid, uid_range)
    home = Homes(info, isolated=True, registry=registry).ensure("web:repair")
    os.chmod(shared_root, 0o777)
    os.chmod(info.layout.chats, 0o755)
    os.chmod(info.layout.personas, 0o700)
    os.chmod(info.layout.state, 0o777)
    stray = make(shared_root / "stray.log", 0o666)
    os.chmod(home.path, 0o777)
    os.chown(home.path, 0, 0)
    loose = make(home.path / "workspace" / "notes", 0o666)
    report = repair(info, isolated=True, registry=registry, deep=True)
    assert report.ok, report.as_dict()
    assert mode(shared_root) == 0o2751
    assert mode(info.layout.chats) == 0o2751
    assert mode(info.layout.personas) == 0o755
    assert mode(info.layout.state) & 0o007 == 0
    assert mode(stray) == 0o660
    assert mode(home.path) == 0o2750
    assert os.lstat(home.path).st_uid == home.account.uid
    assert os.lstat(home.path).st_gid == operator_group.gid
    assert mode(loose) == 0o666  # not the conversation's file (root made it): left alone
    os.chown(loose, home.account.uid, operator_group.gid)
    os.chmod(loose, 0o666)
    repair(info, isolated=True, registry=registry, deep=True, force=True)
    assert mode(loose) == 0o660


def test_repair_cli_json(tmp_path: Path) -> None:
    root = tmp_path / "r"
    env = {**os.environ, "JAZZ_BRIDGE_ISOLATION": "off"}
    run = [sys.executable, "-m", "bridge.cli"]
    subprocess.run(
        [*run, "homes", "ensure", "web:cli", "--root", str(root)],
        check=True,
        env=env,
        capture_output=True,
        timeout=60,
    )
    out = subprocess.run(
        [*run, "repair", "--root", str(root), "--deep", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["homes"] == 1
    assert {"checked", "changed", "skipped", "failed"} <= set(data)


def test_start_repair_is_shallow_and_the_first_ensure_walks(tmp_path: Path) -> None:
    """A restart: the start-up repair fixes the home itself, the first ensure its contents."""
    info = init_root(tmp_path / "r")
    home = Homes(info, isolated=False).ensure("web:planted")
    marker = home.path / ".permissions-repaired"
    assert marker.is_file()  # a new home is walked when first provisioned
    # while the gateway is down the conversation opens its home and drops its marker
    marker.unlink()
    os.chmod(home.path, 0o777)
    planted = make(home.path / "workspace" / "open.txt", 0o666)
    # the next start: shallow, so the home is private again but nothing inside is read
    report = repair(info, isolated=False)
    assert report.ok, report.as_dict()
    assert report.homes == 1 and report.deep.checked == 0
    assert mode(home.path) == 0o700
    assert mode(planted) == 0o666 and not marker.exists()
    # the first ensure in the new process (a new Homes): walked before the conversation runs
    homes = Homes(info, isolated=False)
    again = homes.ensure("web:planted")
    assert again.path == home.path
    assert mode(planted) == 0o600 and marker.is_file()
    # once per conversation per process: a later plant waits for the next process
    os.chmod(planted, 0o666)
    marker.unlink()
    homes.ensure("web:planted")
    assert mode(planted) == 0o666
    Homes(info, isolated=False).ensure("web:planted")
    assert mode(planted) == 0o600


def test_repair_deep_still_walks_every_home(tmp_path: Path) -> None:
    info = init_root(tmp_path / "r")
    homes = Homes(info, isolated=False)
    paths = [homes.ensure(f"web:deep-{i}").path for i in range(3)]
    planted = [make(p / "workspace" / "open.txt", 0o644) for p in paths]
    report = repair(info, isolated=False, deep=True, force=True)
    assert report.ok and report.homes == 3 and report.deep.checked > 0, report.as_dict()
    assert all(mode(p) == 0o600 for p in planted)


def _repair_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge.cli", "repair", *args],
        env={**os.environ, "JAZZ_BRIDGE_ISOLATION": "off"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_repair_deep_from_the_cli_walks_homes_already_marked(tmp_path: Path) -> None:
    """An operator's --deep walks every home; the marker spares only the gateway's own walk."""
    info = init_root(tmp_path / "r")
    home = Homes(info, isolated=False).ensure("web:marked")
    assert (home.path / ".permissions-repaired").is_file()
    planted = make(home.path / "workspace" / "open.txt", 0o644)
    out = _repair_cli("--root", str(info.layout.root), "--deep", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["deep"]["checked"] > 0
    assert mode(planted) == 0o600
    again = make(home.path / "workspace" / "again.txt", 0o644)
    assert _repair_cli("--root", str(info.layout.root), "--force").returncode == 0
    assert mode(again) == 0o600  # --force: the same as --deep


def test_repair_names_a_root_with_no_gateway_state(tmp_path: Path) -> None:
    missing = tmp_path / "nonexist"
    out = _repair_cli("--root", str(missing))
    assert out.returncode == 2
    assert out.stderr.startswith(f"jazz-bridge: error: no gateway state at {missing} (it does ")
    assert f"jazz-bridge init --root {missing}" in out.stderr and "Traceback" not in out.stderr
    assert not missing.exists()
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("not a gateway root")
    out = _repair_cli("--root", str(stranger))
    assert out.returncode == 2 and "has no state/ directory" in out.stderr
    assert sorted(p.name for p in stranger.iterdir()) == ["notes.txt"]
    # an empty directory made for a root (systemd-tmpfiles, a new volume) is set up
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    out = _repair_cli("--root", str(fresh))
    assert out.returncode == 0, out.stderr
    assert (fresh / "state").is_dir()
