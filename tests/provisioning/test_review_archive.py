"""Archiving against what a conversation can leave in its home: a file that is all hole.

``truncate -s 1T workspace/x`` costs a conversation nothing (no blocks), but the packer
reads every byte of it (gzip at level 9 under the root-wide archive lock, so every other
conversation's provisioning waits) and the restore writes every byte back as real blocks:
one idle conversation can fill the gateway's disk when its home comes back.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from provisioning.archive import archive_home, restore_home
from provisioning.homes import Homes
from provisioning.layout import init_root

MIB = 1024 * 1024
APPARENT = 256 * MIB  # a hole, no data


def test_a_sparse_file_does_not_come_back_as_real_blocks(tmp_path: Path) -> None:
    info = init_root(tmp_path / "r")
    home = Homes(info, isolated=False).ensure("web:sparse")
    hole = home.path / "workspace" / "hole"
    with open(hole, "wb") as fh:
        fh.truncate(APPARENT)
    before = os.stat(hole).st_blocks * 512
    assert before < MIB  # the conversation used no space for it

    archive_home(info, home.name)
    restore_home(info, home.name)

    used = sum(
        os.lstat(Path(d) / n).st_blocks * 512
        for d, dirs, files in os.walk(home.path)
        for n in [*dirs, *files]
    )
    # the restored home must not use (much) more disk than the archived one did
    assert used < 16 * MIB, f"restored home uses {used / MIB:.0f} MiB for a {before} byte home"


def test_archiving_one_home_does_not_stop_other_homes_being_provisioned(tmp_path: Path) -> None:
    """While one home is being packed (minutes for a big or sparse one), the next message of
    any *other* conversation must still get its home: the lock is root-wide today.

    The packing is held open through ``archive_home``'s own ``check`` hook (the caller's "is
    it idle" question, which runs under the lock), so no timing is involved."""
    info = init_root(tmp_path / "r")
    homes = Homes(info, isolated=False)
    busy = homes.ensure("web:being-archived")
    inside, release = threading.Event(), threading.Event()

    def check() -> None:
        inside.set()
        release.wait(30)

    packer = threading.Thread(target=archive_home, args=(info, busy.name, check), daemon=True)
    packer.start()
    try:
        assert inside.wait(30), "the archive never started"
        other = threading.Thread(target=homes.ensure, args=("web:someone-else",), daemon=True)
        other.start()
        other.join(10)
        blocked = other.is_alive()
    finally:
        release.set()
        packer.join(30)
    other.join(30)
    assert not blocked, "provisioning an unrelated conversation waited for another's archive"
