"""Entrypoint repair and the deep home walk, against what a conversation can plant."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

from accounts_support import OperatorGroup, needs_root

from provisioning.accounts import AccountRegistry
from provisioning.homes import Homes
from provisioning.layout import init_root
from provisioning.repair import repair
from provisioning.walk import repair_home_tree


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def make(path: Path, m: int, data: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data)
    os.chmod(path, m)
    return path


def test_setgid_home_keeps_group_clears_other(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    f = make(home / "a.txt", 0o666)
    x = make(home / "bin" / "tool", 0o755)
    s = make(home / "suid", 0o4755)
    d = home / "deep" / "er"
    d.mkdir(parents=True)
    os.chmod(home / "deep", 0o777)
    report = repair_home_tree(home, setgid_home=True, owner_uid=os.geteuid())
    assert (mode(f), mode(x), mode(s), mode(home / "deep")) == (0o660, 0o750, 0o750, 0o770)
    assert report.failed == 0 and report.changed >= 4
    assert report.checked >= 7


def test_private_home_clears_group_and_other(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    f = make(home / "a.txt", 0o644)
    x = make(home / "run.sh", 0o755)
    (home / "d").mkdir()
    os.chmod(home / "d", 0o750)
    repair_home_tree(home, setgid_home=False, owner_uid=os.geteuid())
    assert (mode(f), mode(x), mode(home / "d")) == (0o600, 0o700, 0o700)


def test_links_fifos_and_sockets_are_left_alone(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    target = make(outside / "precious", 0o666)
    make(outside / "dir" / "inner", 0o666)
    home = tmp_path / "h"
    home.mkdir()
    (home / "to-file").symlink_to(target)
    (home / "to-dir").symlink_to(outside / "dir")
    os.mkfifo(home / "fifo")
    os.chmod(home / "fifo", 0o666)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(home / "sock"))
    os.chmod(home / "sock", 0o777)
    result: list[object] = []
    t = threading.Thread(
        target=lambda: result.append(
            repair_home_tree(home, setgid_home=True, owner_uid=os.geteuid())
        )
    )
    t.start()
    t.join(timeout=20)
    sock.close()
    assert not t.is_alive(), "the walk hung (opened a FIFO?)"
    assert mode(target) == 0o666
    assert mode(outside / "dir" / "inner") == 0o666
    assert mode(home / "fifo") == 0o666
    assert mode(home / "sock") == 0o777


@needs_root
def test_other_accounts_files_and_their_hard_links_are_untouched(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    theirs = make(home / "theirs", 0o666)
    os.chown(theirs, 65534, 65534)
    elsewhere = make(tmp_path / "elsewhere", 0o666)
    os.chown(elsewhere, 65534, 65534)
    os.link(elsewhere, home / "hardlink")
    repair_home_tree(home, setgid_home=True, owner_uid=os.geteuid())
    assert mode(theirs) == 0o666
    assert mode(elsewhere) == 0o666


SWAPPER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
home, outside, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(n):
    os.symlink(outside, f"{home}/l{i}")
pairs = [(f"{home}/v{i}".encode(), f"{home}/l{i}".encode()) for i in range(n)]
stop = os.path.join(home, "..", "stop-swapping")
print("ready", flush=True)
while not os.path.exists(stop):
    for _ in range(50):
        for a, b in pairs:
            # atomically exchange the directory and a link to outside: always one or the other
            libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE)
"""


def test_a_directory_swapped_for_a_link_mid_walk_is_not_followed(tmp_path: Path) -> None:
    """A real race: another process keeps exchanging directories and links (renameat2)."""
    outside = tmp_path / "outside"
    victims = [make(outside / f"x{i}", 0o666) for i in range(20)]
    home = tmp_path / "h"
    n = 100
    for i in range(n):
        make(home / f"v{i}" / "inside", 0o666)
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(home), str(outside), str(n)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert swapper.stdout is not None and swapper.stdout.readline().strip() == "ready"
        for _ in range(30):
            repair_home_tree(home, setgid_home=True, owner_uid=os.geteuid(), force=True)
    finally:
        (tmp_path / "stop-swapping").touch()
        swapper.wait(timeout=20)
    assert all(mode(v) == 0o666 for v in victims), "the walk followed a swapped link"


def test_marker_written_once_and_honoured(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    make(home / "a", 0o666)
    first = repair_home_tree(home, setgid_home=True, owner_uid=os.geteuid())
    marker = home / ".permissions-repaired"
    assert not first.skipped_by_marker and marker.is_file()
    assert json.loads(marker.read_text())["version"] == 1
    b = make(home / "b", 0o666)
    second = repair_home_tree(home, setgid_home=True, owner_uid=os.geteuid())
    assert second.skipped_by_marker and second.checked == 0
    assert mode(b) == 0o666
    third = repair_home_tree(home, setgid_home=True, owner_uid=os.geteuid(), force=True)
    assert not third.skipped_by_marker and mode(b) == 0o660


def test_marker_not_written_when_the_walk_failed(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    f = make(home / "immutable", 0o666)
    if subprocess.run(["chattr", "+i", str(f)], capture_output=True).returncode != 0:
        import pytest

        pytest.skip("chattr +i is not supported on this filesystem")
    try:
        report = repair_home_tree(home, setgid_home=True, owner_uid=os.geteuid())
    finally:
        subprocess.run(["chattr", "-i", str(f)], check=False)
    assert report.failed == 1 and "immutable" in report.errors[0]
    assert not (home / ".permissions-repaired").exists()


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
