"""Review: a sparse member of more than 8 GiB of data cannot be restored.

archive.py stores a file with holes as a GNU sparse 1.0 member: the header's size is the
stored size (the extent map, then the data) and ``GNU.sparse.realsize`` the file's size.
When the stored size reaches 8 GiB (8**11, what a ustar size field holds) ``tarfile`` adds
a PAX ``size`` record. Reading it back, ``tarfile`` applies that record after
``GNU.sparse.realsize`` (the member's size becomes the stored size, not the file's) and
computes the next header's offset from the data *after* the map: the member is restored
wrong or refused ("a sparse map out of order or past its size") and every member after it is
misread. A sparse disk image of 20 GB with 9 GB in it is an ordinary file; its home is
archived fine and then never comes back (the conversation's next message fails).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from provisioning import archive
from provisioning.homes import Homes
from provisioning.layout import init_root

MIB = 1024 * 1024
DATA = 8 * 1024 * MIB + MIB  # just over 8 GiB of data
HOLE = MIB  # a trailing hole: the file is packed as a sparse member


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 * MIB):
            h.update(chunk)
    return h.hexdigest()


def test_a_sparse_file_with_more_than_8_gib_of_data_round_trips(tmp_path: Path) -> None:
    if shutil.disk_usage(tmp_path).free < 3 * DATA:
        pytest.skip("needs about 25 GiB free")
    root = tmp_path / "root"
    try:
        info = init_root(root)
        home = Homes(info, isolated=False).ensure("web:disk-image")
        big = home.path / "workspace" / "disk.img"
        after = home.path / "workspace" / "z-after.txt"  # packed after it
        block = bytes(range(256)) * (MIB // 256)
        with open(big, "wb") as f:
            for _ in range(DATA // MIB):
                f.write(block)
            f.truncate(DATA + HOLE)
        after.write_text("written after the disk image\n")
        assert os.stat(big).st_blocks * 512 < DATA + HOLE  # it has a hole
        want = _digest(big)

        archive.archive_home(info, home.name)
        archive.restore_home(info, home.name)

        assert os.stat(big).st_size == DATA + HOLE
        assert _digest(big) == want
        assert after.read_text() == "written after the disk image\n"
    finally:
        shutil.rmtree(root, ignore_errors=True)  # 8 GiB must not stay behind in /tmp
