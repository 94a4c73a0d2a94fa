"""The deep home walk (provisioning.walk) on trees deeper than its descriptors: walked within
a few of them, never broken by directories moved under it, refused past its depth limit."""

from __future__ import annotations

import os
import resource
import stat
import threading
from pathlib import Path

from home_support import mkdir, open_fds, walk

from provisioning.modes import REPAIR_MARKER
from provisioning.walk import FD_BUDGET, MAX_DEPTH, WalkReport


def make_deep(top: Path, depth: int, dir_mode: int = 0o777) -> None:
    """``depth`` nested directories ``d`` below ``top``, a 0666 file ``leaf`` at the bottom."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            os.chmod("d", dir_mode, dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(os.open("leaf", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
        os.chmod("leaf", 0o666, dir_fd=fd)
    finally:
        os.close(fd)


def modes_down(top: Path, depth: int) -> tuple[list[int], int]:
    """Modes of the ``depth`` nested directories and of the leaf, read through descriptors."""
    out: list[int] = []
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
            out.append(stat.S_IMODE(os.fstat(fd).st_mode))
        leaf = stat.S_IMODE(os.stat("leaf", dir_fd=fd, follow_symlinks=False).st_mode)
    finally:
        os.close(fd)
    return out, leaf


def test_a_deep_tree_is_walked_within_a_few_descriptors(tmp_path: Path, deep_cleanup: None) -> None:
    home = mkdir(tmp_path / "home", 0o750)
    depth = 600  # far more levels than the descriptor limit set below
    make_deep(home, depth)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = open_fds() + FD_BUDGET + 16
    assert limit < depth
    before = open_fds()
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        report = walk(home)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert report.failed == 0, report.errors
    assert report.checked == 1 + depth + 1
    dirs, leaf = modes_down(home, depth)
    assert dirs == [0o770] * depth and leaf == 0o660
    assert open_fds() == before  # every descriptor closed again


def test_directories_moved_under_a_deep_walk_never_break_it(tmp_path: Path) -> None:
    """A real race on the parked levels: level 6 keeps moving out of level 5 and back.

    Whatever the walk meets (a name gone, a parked parent no longer its child's ``..``) is
    a failure it counts, never an exception nor a leaked descriptor, and once the mover
    stops a walk repairs everything.
    """
    home = mkdir(tmp_path / "home", 0o750)
    depth = FD_BUDGET + 60
    make_deep(home, depth)
    level5 = home.joinpath(*["d"] * 5)
    elsewhere = mkdir(home / "elsewhere", 0o700)
    before = open_fds()
    messages: list[str] = []
    for _round in range(30):
        out: list[WalkReport] = []
        err: list[BaseException] = []

        def target(out: list[WalkReport] = out, err: list[BaseException] = err) -> None:
            try:
                out.append(walk(home, force=True))
            except BaseException as exc:
                err.append(exc)

        t = threading.Thread(target=target, daemon=True)
        t.start()
        moves = 0
        while t.is_alive() and moves < 100_000:
            os.rename(level5 / "d", elsewhere / "d")
            os.rename(elsewhere / "d", level5 / "d")
            moves += 1
        t.join(timeout=20)
        assert not t.is_alive(), "the walk did not finish"
        assert not err, err
        messages += out[0].errors
    assert open_fds() == before
    allowed = ("moved during the walk", "No such file")
    assert all(any(a in m for a in allowed) for m in messages), messages
    final = walk(home, force=True)
    assert final.failed == 0, final.errors
    dirs, leaf = modes_down(home, depth)
    assert dirs == [0o770] * depth and leaf == 0o660


def test_deeper_than_the_limit_is_refused_and_counted(tmp_path: Path, deep_cleanup: None) -> None:
    home = mkdir(tmp_path / "home", 0o750)
    depth = MAX_DEPTH + 2
    make_deep(home, depth)
    report = walk(home)
    assert report.failed == 1
    assert "deeper than" in report.errors[0]
    dirs, leaf = modes_down(home, depth)
    assert dirs[:MAX_DEPTH] == [0o770] * MAX_DEPTH  # everything down to the limit repaired
    assert dirs[MAX_DEPTH:] == [0o777, 0o777] and leaf == 0o666  # below it: not walked
    assert not (home / REPAIR_MARKER).exists()  # a walk with failures leaves no marker
