"""Archiving a home with sparse files: holes stay holes, and packing follows the data.

``archive.py`` packs a file with holes by its data extents ("instead of reading every zero
for hours") as a GNU sparse member: what a conversation can make for free (a terabyte of
hole, a fragmented file, a disk image with gigabytes in it) is archived in bounded time and
comes back whole, using no more disk than it did.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from home_support import REPO

from provisioning import archive
from provisioning.errors import ArchiveError
from provisioning.homes import Homes
from provisioning.layout import init_root

MIB = 1024 * 1024
STRIDE = 16 * MIB  # between a fragmented file's one-byte runs of data
BOUND_S = 120
APPARENT = 256 * MIB  # a hole, no data
DATA = 8 * 1024 * MIB + MIB  # just over 8 GiB of data
HOLE = MIB  # a trailing hole: the file is packed as a sparse member


def test_a_sparse_file_does_not_come_back_as_real_blocks(tmp_path: Path) -> None:
    """``truncate -s 1T workspace/x`` costs a conversation nothing (no blocks), but the
    packer read every byte of it (gzip at level 9 under the root-wide archive lock, so every
    other conversation's provisioning waited) and the restore wrote every byte back as real
    blocks: one idle conversation could fill the gateway's disk when its home came back."""
    info = init_root(tmp_path / "r")
    home = Homes(info, isolated=False).ensure("web:sparse")
    hole = home.path / "workspace" / "hole"
    with open(hole, "wb") as fh:
        fh.truncate(APPARENT)
    before = os.stat(hole).st_blocks * 512
    assert before < MIB  # the conversation used no space for it

    archive.archive_home(info, home.name)
    archive.restore_home(info, home.name)

    used = sum(
        os.lstat(Path(d) / n).st_blocks * 512
        for d, dirs, files in os.walk(home.path)
        for n in [*dirs, *files]
    )
    # the restored home must not use (much) more disk than the archived one did
    assert used < 16 * MIB, f"restored home uses {used / MIB:.0f} MiB for a {before} byte home"


PACK = r"""
import sys
sys.path.insert(0, sys.argv[3])
from pathlib import Path
import pytest

from provisioning import archive
from provisioning.layout import init_root
info = init_root(Path(sys.argv[1]))
print(archive.archive_home(info, sys.argv[2]).tarball)
"""


@pytest.mark.parametrize("over", [0, 1], ids=["exactly-at-the-limit", "one-over-the-limit"])
def test_a_file_with_many_extents_is_archived_in_bounded_time_and_comes_back(
    tmp_path: Path, over: int
) -> None:
    """A file with more than ``MAX_SPARSE_EXTENTS`` (65,536) data extents fell back to
    being "stored whole": every hole read as zeros and gzipped. A conversation makes such a
    file with 65,537 one-byte writes 16 MiB apart (256 MiB on disk, 1 TiB apparent): packing
    it read and compressed a terabyte of zeros, for hours, while holding the home's lock
    exclusively (the conversation's next message waited on it), and a restore read it all
    back. At the limit packing takes seconds and round-trips; one extent more and it reads
    1 TiB of zeros (the failure). The archive runs in a child process, bounded."""
    info = init_root(tmp_path / "root")
    home = Homes(info, isolated=False).ensure("web:many-extents")
    extents = archive.MAX_SPARSE_EXTENTS + over
    target = home.path / "workspace" / "many-extents.bin"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        for i in range(extents):
            os.pwrite(fd, b"x", i * STRIDE)
        os.ftruncate(fd, extents * STRIDE)
    finally:
        os.close(fd)
    st = os.stat(target)
    assert st.st_blocks * 512 < 512 * 1024 * 1024 and st.st_size >= 1 << 40  # 1 TiB of holes

    try:
        proc = subprocess.run(
            [sys.executable, "-c", PACK, str(info.layout.root), home.name, str(REPO)],
            capture_output=True,
            text=True,
            timeout=BOUND_S,
        )
    except subprocess.TimeoutExpired:  # subprocess.run has killed and reaped it
        raise AssertionError(
            f"archiving a home with a {extents}-extent file (256 MiB of data) took over "
            f"{BOUND_S} s: it is stored whole, {st.st_size >> 30} GiB of holes read as zeros"
        ) from None
    assert proc.returncode == 0, proc.stderr[-2000:]
    with tarfile.open(proc.stdout.strip()) as tar:
        member = next(m for m in tar if m.name.endswith("/many-extents.bin"))
        assert member.size == st.st_size
    archive.restore_home(info, home.name)
    back = os.stat(target)
    assert back.st_size == st.st_size and back.st_blocks <= 2 * st.st_blocks  # holes stay holes
    fd = os.open(target, os.O_RDONLY)
    try:
        for i in (0, 1, extents // 2, extents - 1):
            assert os.pread(fd, 2, i * STRIDE) == b"x\0"
            assert i == 0 or os.pread(fd, 1, i * STRIDE - 1) == b"\0"
    finally:
        os.close(fd)


def test_a_file_whose_holes_cannot_be_filled_in_cheaply_leaves_its_home_unarchived(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the map's limit, filling in the smallest holes would read more zeros than
    MAX_FILLED_ZEROS (the limits are lowered here to keep the file small): the home is
    refused, named, and left whole, rather than hours of zeros read."""
    monkeypatch.setattr(archive, "MAX_SPARSE_EXTENTS", 4)
    monkeypatch.setattr(archive, "MAX_FILLED_ZEROS", STRIDE)  # one hole's worth
    info = init_root(tmp_path / "root")
    home = Homes(info, isolated=False).ensure("web:refused")
    target = home.path / "workspace" / "fragmented.bin"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        for i in range(7):  # 7 runs of data: 3 holes to fill, 3 x 16 MiB of zeros
            os.pwrite(fd, b"x", i * STRIDE)
    finally:
        os.close(fd)
    with pytest.raises(ArchiveError, match=r"fragmented\.bin has 7 separate runs"):
        archive.archive_home(info, home.name)
    assert target.exists() and not list((info.layout.root / "archive").glob("*.tar.gz"))


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 * MIB):
            h.update(chunk)
    return h.hexdigest()


def test_a_sparse_file_with_more_than_8_gib_of_data_round_trips(tmp_path: Path) -> None:
    """A file with holes is stored as a GNU sparse 1.0 member: the header's size is the
    stored size (the extent map, then the data) and ``GNU.sparse.realsize`` the file's
    size. When the stored size reaches 8 GiB (8**11, what a ustar size field holds)
    ``tarfile`` adds a PAX ``size`` record. Reading it back, ``tarfile`` applies that record
    after ``GNU.sparse.realsize`` (the member's size becomes the stored size, not the
    file's) and computes the next header's offset from the data *after* the map: the member
    was restored wrong or refused ("a sparse map out of order or past its size") and every
    member after it misread. A sparse disk image of 20 GB with 9 GB in it is an ordinary
    file; its home was archived fine and then never came back (the conversation's next
    message failed)."""
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
