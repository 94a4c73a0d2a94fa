"""chmod_entry changes only the inode that was examined: never a link, never a swapped entry.

Each case runs through both ways of changing a pinned entry: fchmodat2 with AT_EMPTY_PATH
on the O_PATH descriptor, and chmod of /proc/self/fd/N (older kernels).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from home_support import mode

from provisioning import pinned


@pytest.fixture(params=["fchmodat2", "proc-fd"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(pinned, "_fchmodat2_works", None if request.param == "fchmodat2" else False)
    return str(request.param)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    d = tmp_path / "home"
    d.mkdir()
    fd = pinned.open_dir(d)
    try:
        yield d, fd
    finally:
        os.close(fd)


def test_changes_the_examined_file(way: str, home: tuple[Path, int]) -> None:
    d, fd = home
    (d / "notes.txt").write_text("x")
    os.chmod(d / "notes.txt", 0o644)
    assert pinned.chmod_entry(fd, "notes.txt", 0o600, os.lstat(d / "notes.txt"))
    assert mode(d / "notes.txt") == 0o600
    if way == "fchmodat2":
        assert pinned._fchmodat2_works is True  # this kernel has it (6.6+)


def test_a_swap_to_a_hard_link_of_another_file_is_left_alone(
    way: str, home: tuple[Path, int], tmp_path: Path
) -> None:
    d, fd = home
    (d / "notes.txt").write_text("mine")
    os.chmod(d / "notes.txt", 0o644)
    examined = os.lstat(d / "notes.txt")
    # between the walk's lstat and the change, the entry becomes a hard link to a file
    # outside the home (another account's, on a real system)
    victim = tmp_path / "victim"
    victim.write_text("someone else's")
    os.chmod(victim, 0o644)
    os.link(victim, d / "swap")
    os.replace(d / "swap", d / "notes.txt")
    assert not pinned.chmod_entry(fd, "notes.txt", 0o600, examined)
    assert mode(victim) == 0o644


def test_a_swap_to_a_symbolic_link_is_left_alone(
    way: str, home: tuple[Path, int], tmp_path: Path
) -> None:
    d, fd = home
    (d / "notes.txt").write_text("mine")
    examined = os.lstat(d / "notes.txt")
    target = tmp_path / "target"
    target.write_text("t")
    os.chmod(target, 0o644)
    os.unlink(d / "notes.txt")
    os.symlink(target, d / "notes.txt")
    assert not pinned.chmod_entry(fd, "notes.txt", 0o600, examined)
    assert mode(target) == 0o644
    assert os.path.islink(d / "notes.txt")


def test_a_vanished_entry_changes_nothing(way: str, home: tuple[Path, int]) -> None:
    d, fd = home
    (d / "gone").write_text("x")
    examined = os.lstat(d / "gone")
    os.unlink(d / "gone")
    assert not pinned.chmod_entry(fd, "gone", 0o600, examined)


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_same_inode_with_another_owner_is_left_alone(way: str, home: tuple[Path, int]) -> None:
    d, fd = home
    (d / "notes.txt").write_text("x")
    os.chmod(d / "notes.txt", 0o644)
    examined = os.lstat(d / "notes.txt")
    os.chown(d / "notes.txt", 65533, 65533)
    os.chmod(d / "notes.txt", 0o644)
    assert not pinned.chmod_entry(fd, "notes.txt", 0o600, examined)
    assert mode(d / "notes.txt") == 0o644
