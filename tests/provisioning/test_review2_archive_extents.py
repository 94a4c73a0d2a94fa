"""Review: archiving a home with a file of more than MAX_SPARSE_EXTENTS data extents.

archive.py packs a file with holes by its data extents, "instead of reading every zero
for hours", but a file with more than ``MAX_SPARSE_EXTENTS`` (65,536) extents falls back to
being "stored whole": every hole is read as zeros and gzipped. A conversation makes such a
file with 65,537 one-byte writes 16 MiB apart (256 MiB on disk, 1 TiB apparent): packing it
then reads and compresses a terabyte of zeros, for hours, while holding the home's lock
exclusively (the conversation's next message waits on it), and a restore reads it all back.

The archive runs in a child process, bounded: a packing that follows the data takes seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from provisioning import archive
from provisioning.homes import Homes
from provisioning.layout import init_root

REPO = Path(__file__).resolve().parents[2]
STRIDE = 16 * 1024 * 1024
BOUND_S = 120

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
    """At the limit (65,536 extents) packing takes seconds and round-trips; one extent more
    and it reads 1 TiB of zeros (the failure)."""
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
    with pytest.raises(archive.ArchiveError, match=r"fragmented\.bin has 7 separate runs"):
        archive.archive_home(info, home.name)
    assert target.exists() and not list((info.layout.root / "archive").glob("*.tar.gz"))
