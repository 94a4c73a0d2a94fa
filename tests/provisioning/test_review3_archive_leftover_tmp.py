"""A half-written tarball left in ``archive/`` by an archiving cut off (kill -9, power loss)
is removed by the next archiving of that home, never by another's: before, it stayed for
ever, as big as the home, in a directory operators rarely look at."""

from __future__ import annotations

import os
from pathlib import Path

from provisioning import naming
from provisioning.archive import archive_home, restore_home, tarball_path
from provisioning.layout import init_root


def test_an_archiving_cut_off_leaves_no_half_tarball_for_ever(tmp_path: Path) -> None:
    info = init_root(tmp_path / "r")
    name = naming.home_name("web:leftover")
    other = naming.home_name("web:other")
    for home in (name, other):
        info.layout.home(home).mkdir(mode=0o700)
        (info.layout.home(home) / "notes.txt").write_text("kept")
    archive_home(info, other)
    restore_home(info, other)  # archive/ exists now, as after any earlier archiving
    leftover = info.layout.archive / f".{name}.k3j9x0qa.tmp"  # what mkstemp names
    leftover.write_bytes(b"\x1f\x8b half a tarball")
    others = info.layout.archive / f".{name}-x.k3j9x0qa.tmp"  # a home named longer: not ours
    others.write_bytes(b"\x1f\x8b another home's")
    archive_home(info, name)
    left = sorted(os.listdir(info.layout.archive))
    assert left == sorted([others.name, tarball_path(info.layout, name).name]), left
