"""The deep home walk (provisioning.walk) on real files: the rule, what it leaves alone, races,
the marker, and names a conversation chose shown escaped in what it reports. Trees deeper than
its descriptors are in test_walk_depth.py.

Tests that need root (chown to another uid, device nodes, ``chattr +i``) are skipped
without it; the others make no root assumptions.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from accounts_support import IS_ROOT
from home_support import HOSTILE_NAME, OTHER_UID, bounded, exchange, make, mkdir, mode, walk

from provisioning.errors import UnsafePathError
from provisioning.homes import Homes
from provisioning.layout import init_root
from provisioning.modes import REPAIR_MARKER
from provisioning.walk import MAX_DEPTH, TreeWalk, WalkReport, repair_home_tree

root_only = pytest.mark.skipif(not IS_ROOT, reason="needs root (chown, mknod, chattr)")
ME = os.geteuid()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return mkdir(tmp_path / "home", 0o750)


# --- the rule ---------------------------------------------------------------------------


def test_setgid_home_clears_only_other_bits(home: Path) -> None:
    os.chmod(home, 0o777)
    f = make(home / "notes.txt", 0o666)
    x = make(home / "bin" / "tool", 0o755)
    os.chmod(home / "bin", 0o777)
    suid = make(home / "suid", 0o4755)
    sgid = make(home / "sgid", 0o2775)
    own = make(home / "mine", 0o700)
    sticky = mkdir(home / "sticky", 0o1777)
    report = walk(home, setgid=True)
    assert mode(home) == 0o770
    assert mode(f) == 0o660
    assert mode(home / "bin") == 0o770
    assert mode(x) == 0o750  # the owner's execute is kept, group read kept
    assert mode(suid) == 0o750  # setuid stripped from a regular file
    assert mode(sgid) == 0o770  # setgid stripped from a regular file
    assert mode(own) == 0o700
    assert mode(sticky) == 0o1770  # directories only lose bits
    assert report.failed == 0 and report.errors == []


def test_directories_gain_nothing_and_keep_setgid(home: Path) -> None:
    plain = mkdir(home / "plain", 0o777)
    sgid = mkdir(home / "sgid", 0o777)
    os.chmod(sgid, 0o2777)
    if mode(sgid) != 0o2777:
        pytest.skip("this filesystem does not keep setgid on a directory for us")
    walk(home, setgid=True)
    assert mode(plain) == 0o770  # no setgid added
    assert mode(sgid) == 0o2770


def test_private_home_clears_group_and_other_bits(home: Path) -> None:
    os.chmod(home, 0o755)
    f = make(home / "a.txt", 0o644)
    x = make(home / "run.sh", 0o755)
    d = mkdir(home / "d", 0o750)
    inner = make(d / "inner", 0o664)
    report = walk(home, setgid=False)
    assert (mode(home), mode(f), mode(x), mode(d), mode(inner)) == (
        0o700,
        0o600,
        0o700,
        0o700,
        0o600,
    )
    assert report.failed == 0


def test_counts_for_a_known_tree(home: Path) -> None:
    a = mkdir(home / "a", 0o777)
    make(a / "f1", 0o666)
    make(a / "f2", 0o640)
    (home / "link").symlink_to(a / "f1")
    os.mkfifo(home / "fifo", 0o600)
    mkdir(home / "b", 0o750)
    first = walk(home)
    # home, a, a/f1, a/f2, link, fifo, b; a and a/f1 changed; link and fifo left alone
    assert first.as_dict() == {"checked": 7, "changed": 2, "skipped": 2, "failed": 0}
    again = walk(home, force=True)  # the marker itself is the walk's own, not counted
    assert again.as_dict() == {"checked": 7, "changed": 0, "skipped": 2, "failed": 0}


def test_hard_links_to_the_owners_own_files_are_changed(home: Path, tmp_path: Path) -> None:
    mine = make(tmp_path / "elsewhere", 0o666)
    os.link(mine, home / "hard")
    report = walk(home)
    assert mode(home / "hard") == 0o660 == mode(mine)  # its own file: changed
    assert report.changed == 1


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


# --- what it leaves alone ---------------------------------------------------------------


def test_links_to_outside_are_not_followed(home: Path, tmp_path: Path) -> None:
    outside = mkdir(tmp_path / "outside", 0o777)
    target = make(outside / "precious", 0o666)
    inner_dir = mkdir(outside / "dir", 0o777)
    inner = make(inner_dir / "inner", 0o666)
    (home / "to-file").symlink_to(target)
    (home / "to-dir").symlink_to(inner_dir)
    (home / "to-outside").symlink_to(outside)
    report = walk(home)
    assert mode(target) == 0o666
    assert mode(inner) == 0o666
    assert mode(inner_dir) == 0o777
    assert mode(outside) == 0o777
    assert report.skipped == 3 and report.failed == 0


def test_fifo_and_socket_do_not_block_and_are_left_alone(home: Path) -> None:
    os.mkfifo(home / "fifo")  # nobody ever opens its other end: opening it would hang
    os.chmod(home / "fifo", 0o666)
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(home / "sock"))
        os.chmod(home / "sock", 0o777)
        report = bounded(lambda: walk(home), timeout=20)
    finally:
        sock.close()
    assert mode(home / "fifo") == 0o666
    assert mode(home / "sock") == 0o777
    assert report.skipped == 2 and report.failed == 0


@root_only
def test_other_accounts_entries_are_untouched(home: Path, tmp_path: Path) -> None:
    theirs = make(home / "theirs", 0o666)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    elsewhere = make(tmp_path / "elsewhere", 0o666)
    os.chown(elsewhere, OTHER_UID, OTHER_UID)
    os.link(elsewhere, home / "hardlink")
    assert os.lstat(home / "hardlink").st_nlink == 2
    their_dir = mkdir(home / "their-dir", 0o777)
    os.chown(their_dir, OTHER_UID, OTHER_UID)
    os.chmod(their_dir, 0o777)
    mine_inside = make(their_dir / "mine", 0o666)
    report = walk(home)
    assert mode(theirs) == 0o666
    assert mode(elsewhere) == 0o666 == mode(home / "hardlink")
    assert mode(their_dir) == 0o777  # left as it is ...
    assert mode(mine_inside) == 0o660  # ... but the owner's own files in it are repaired
    assert report.skipped == 3 and report.failed == 0


@root_only
def test_devices_are_left_alone(home: Path) -> None:
    os.mknod(home / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.chmod(home / "null", 0o666)
    report = bounded(lambda: walk(home), timeout=20)
    assert mode(home / "null") == 0o666
    assert report.skipped == 1 and report.failed == 0


def test_a_home_that_is_a_link_or_missing_is_refused(tmp_path: Path) -> None:
    real = mkdir(tmp_path / "real", 0o777)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(UnsafePathError):
        walk(tmp_path / "link")
    assert mode(real) == 0o777
    with pytest.raises(FileNotFoundError):
        walk(tmp_path / "missing")


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


@root_only
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


# --- the race: a directory swapped for a link while the walk runs ------------------------


def test_a_directory_swapped_for_a_link_mid_walk_is_never_followed(tmp_path: Path) -> None:
    outside = mkdir(tmp_path / "outside", 0o777)
    victims = [make(outside / f"x{i}", 0o666) for i in range(30)]
    outside_sub = mkdir(outside / "sub", 0o777)
    victims.append(make(outside_sub / "y", 0o666))
    home = mkdir(tmp_path / "home", 0o750)
    pairs: list[tuple[bytes, bytes]] = []
    for i in range(40):
        v = mkdir(home / f"v{i}", 0o777)
        for j in range(40):
            make(v / f"f{j}", 0o666)
        link = home / f"l{i}"
        link.symlink_to(outside)
        pairs.append((bytes(v), bytes(link)))
    try:
        exchange(*pairs[0])
        exchange(*pairs[0])
    except OSError as exc:
        pytest.skip(f"renameat2(RENAME_EXCHANGE) unavailable here: {exc}")

    total_swaps = 0
    for _round in range(6):
        out: list[WalkReport] = []
        err: list[BaseException] = []

        def target(out: list[WalkReport] = out, err: list[BaseException] = err) -> None:
            try:
                out.append(walk(home, force=True))
            except BaseException as exc:
                err.append(exc)

        t = threading.Thread(target=target, daemon=True)
        t.start()
        swaps = 0
        while t.is_alive() and swaps < 400_000:  # bounded however slow the walk is
            for a, b in pairs:
                exchange(a, b)
            swaps += len(pairs)
        t.join(timeout=20)
        assert not t.is_alive(), "the walk did not finish"
        assert not err, err  # races are counted, never raised
        total_swaps += swaps
        # a walk that followed a link even once would have changed these
        assert [mode(v) for v in victims] == [0o666] * len(victims)
        assert mode(outside) == 0o777 and mode(outside_sub) == 0o777
    assert total_swaps > 0, "the swapper never ran while a walk did"


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


# --- the marker -------------------------------------------------------------------------


def test_marker_written_once_and_honoured(home: Path) -> None:
    make(home / "a", 0o666)
    first = walk(home)
    marker = home / REPAIR_MARKER
    assert not first.skipped_by_marker
    st = os.lstat(marker)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == ME and stat.S_IMODE(st.st_mode) == 0o640
    doc = json.loads(marker.read_text())
    assert doc["version"] == 1 and doc["repairedAt"].endswith("+00:00")
    b = make(home / "b", 0o666)
    second = walk(home)
    assert second.skipped_by_marker and second.as_dict()["checked"] == 0
    assert mode(b) == 0o666
    third = walk(home, force=True)
    assert not third.skipped_by_marker and mode(b) == 0o660
    assert third.changed == 1


def test_marker_mode_in_a_private_home(home: Path) -> None:
    walk(home, setgid=False)
    assert mode(home / REPAIR_MARKER) == 0o600


def test_a_planted_marker_link_is_replaced_not_followed(home: Path, tmp_path: Path) -> None:
    outside = make(tmp_path / "outside-file", 0o666, data="keep me")
    (home / REPAIR_MARKER).symlink_to(outside)
    make(home / "a", 0o666)
    report = walk(home)  # a link is no marker: the walk runs
    assert not report.skipped_by_marker and mode(home / "a") == 0o660
    marker = home / REPAIR_MARKER
    assert stat.S_ISREG(os.lstat(marker).st_mode)
    assert outside.read_text() == "keep me" and mode(outside) == 0o666


def test_a_marker_hard_linked_elsewhere_is_replaced_not_truncated(
    home: Path, tmp_path: Path
) -> None:
    outside = make(tmp_path / "outside-file", 0o666, data="keep me")
    os.link(outside, home / REPAIR_MARKER)
    os.chmod(outside, 0o640)  # so the walk's own rule leaves it as is
    walk(home, force=True)
    assert outside.read_text() == "keep me"
    assert os.lstat(home / REPAIR_MARKER).st_ino != os.lstat(outside).st_ino


def test_a_marker_fifo_is_replaced_without_blocking(home: Path) -> None:
    os.mkfifo(home / REPAIR_MARKER)
    report = bounded(lambda: walk(home), timeout=20)
    assert report.failed == 0
    assert stat.S_ISREG(os.lstat(home / REPAIR_MARKER).st_mode)


def test_a_marker_that_is_a_directory_is_a_failure(home: Path) -> None:
    mkdir(home / REPAIR_MARKER / "full", 0o700)
    report = walk(home)
    assert report.failed == 1 and REPAIR_MARKER in report.errors[0]
    assert (home / REPAIR_MARKER / "full").is_dir()


@root_only
def test_marker_not_written_and_stale_one_dropped_when_the_walk_failed(home: Path) -> None:
    walk(home)
    assert (home / REPAIR_MARKER).is_file()
    f = make(home / "immutable", 0o666)
    if subprocess.run(["chattr", "+i", str(f)], capture_output=True, timeout=30).returncode:
        pytest.skip("chattr +i is not supported on this filesystem")
    try:
        report = walk(home, force=True)
    finally:
        subprocess.run(["chattr", "-i", str(f)], check=False, timeout=30)
    assert report.failed == 1 and "immutable" in report.errors[0]
    assert mode(f) == 0o666
    # the earlier marker is gone, so the next start walks again
    assert not (home / REPAIR_MARKER).exists()
    again = walk(home)
    assert not again.skipped_by_marker and again.failed == 0 and mode(f) == 0o660


@pytest.mark.skipif(IS_ROOT, reason="root reads any directory")
def test_an_unreadable_directory_is_a_failure_not_an_exception(home: Path) -> None:
    locked = mkdir(home / "locked", 0o000)
    try:
        report = walk(home)
    finally:
        os.chmod(locked, 0o700)
    assert report.failed == 1 and "locked" in report.errors[0]
    assert not (home / REPAIR_MARKER).exists()


def test_merge_and_error_cap() -> None:
    a = WalkReport(checked=1, changed=2, skipped=3, failed=4, errors=["x"] * 49)
    a.merge(WalkReport(checked=10, changed=20, skipped=30, failed=40, errors=["y"] * 10))
    assert a.as_dict() == {"checked": 11, "changed": 22, "skipped": 33, "failed": 44}
    assert a.errors == ["x"] * 49 + ["y"]


def test_the_permissions_repaired_marker_spares_the_next_walk_until_forced(
    tmp_path: Path,
) -> None:
    """The marker by its name on disk, in a home made with the test's umask."""
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
        pytest.skip("chattr +i is not supported on this filesystem")
    try:
        report = repair_home_tree(home, setgid_home=True, owner_uid=os.geteuid())
    finally:
        subprocess.run(["chattr", "-i", str(f)], check=False)
    assert report.failed == 1 and "immutable" in report.errors[0]
    assert not (home / ".permissions-repaired").exists()


# --- names a conversation chose, in the walk's messages -------------------------------------


def _too_deep_under(parent: Path, first: bytes) -> None:
    """``first`` then plain levels, deeper than the walk goes (so the walk fails there)."""
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in [first] + [b"d"] * (MAX_DEPTH + 1):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


def test_a_hostile_name_is_escaped_in_repair_output(tmp_path: Path, deep_cleanup: None) -> None:
    """``jazz-bridge repair`` prints each failure with its path: one under a directory the
    conversation named with a newline and a terminal escape (``x\\n  failed: ...\\x1b[2J``)
    printed a forged failure line of the agent's choosing and cleared the operator's
    terminal. The walk's messages show such characters escaped (``\\n``, ``\\x1b``,
    ``\\xff``), so one failure is one line, and what it names can be found."""
    root = tmp_path / "r"
    info = init_root(root)
    home = Homes(info, isolated=False).ensure("web:names")
    _too_deep_under(home.path / "workspace", HOSTILE_NAME)

    report = repair_home_tree(home.path, setgid_home=False, owner_uid=os.geteuid(), force=True)
    assert report.failed == 1
    (error,) = report.errors
    assert error.isprintable(), error
    assert "x\\n  failed: forged line\\x1b[2J\\xff/d/" in error

    out = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "repair", "--root", str(root), "--deep"],
        env={**os.environ, "JAZZ_BRIDGE_ISOLATION": "off"},
        capture_output=True,
        timeout=120,
    )
    assert out.returncode == 1, out.stderr
    lines = out.stdout.decode("utf-8").splitlines()
    assert [line for line in lines if "failed:" in line and not line.startswith("repaired")] == [
        line for line in lines if line.startswith("  failed: ")
    ]
    assert len([line for line in lines if line.startswith("  failed: ")]) == 1
    assert b"\x1b" not in out.stdout and b"\xff" not in out.stdout


def test_a_directory_removed_after_it_was_listed_is_no_failure(tmp_path: Path) -> None:
    """A place another program cleans while the walk goes (a browser's profile in /tmp,
    gone between the listing and the opening): nothing is left to do there, and the walk
    must not fail for it (a failed walk keeps a freed uid from serving again)."""
    top = tmp_path / "place"
    for name in ("a", "b"):
        (top / name / "inner").mkdir(parents=True)
    removed: list[str] = []

    class RemovesSibling(TreeWalk):
        def directory(self, fd: int, st: os.stat_result, where: str, *, top: bool) -> None:
            if not top and not removed:  # both are listed already: the other is opened next
                other = "b" if where.endswith("/a") else "a"
                (tmp_path / "place" / other / "inner").rmdir()
                (tmp_path / "place" / other).rmdir()
                removed.append(other)

    report = WalkReport()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        RemovesSibling(report).run(fd, str(top))
    finally:
        os.close(fd)
    assert removed and not (top / removed[0]).exists()
    assert report.failed == 0 and report.errors == [], report
