"""Restoring a home: a damaged archive is refused whole and kept, never half-restored; what
comes back never runs as someone else; a restore cut off leaves no copy behind.

The restore deletes the tarball once the home is back, so the tarball is the only copy of
the home: a restore that takes damaged bytes for the home's (a flipped bit, a stream cut
short) loses the conversation's files for good.
"""

from __future__ import annotations

import gzip
import io
import os
import random
import tarfile
import tempfile
from pathlib import Path

import pytest
from accounts_support import needs_root

from provisioning import naming
from provisioning.archive import archive_home, restore_home, tarball_path
from provisioning.errors import ArchiveError
from provisioning.layout import RootInfo, init_root

SET_ID_BITS = 0o6000
CONV_UID = 71234  # a conversation account's uid as an archive records it (numeric only)
FILES = 5
FILE_BYTES = 50_000  # random: deflate stores it as is, so a flipped byte still inflates


def _archived_home(tmp_path: Path) -> tuple[RootInfo, str, dict[str, bytes]]:
    info = init_root(tmp_path / "r")
    name = naming.home_name("web:damaged")
    home = info.layout.home(name)
    home.mkdir(mode=0o700)
    files = {f"f{i}.bin": random.Random(i).randbytes(FILE_BYTES) for i in range(FILES)}
    for file, data in files.items():
        (home / file).write_bytes(data)
    archive_home(info, name)
    return info, name, files


def _refused_and_kept(info: RootInfo, name: str, damaged: bytes) -> None:
    tarball = tarball_path(info.layout, name)
    tarball.write_bytes(damaged)
    with pytest.raises(ArchiveError, match=str(tarball)):
        restore_home(info, name)
    assert tarball.read_bytes() == damaged, "the only copy of the home was deleted"
    assert os.listdir(info.layout.chats) == [], "a home or staging directory was left"


def test_a_flipped_byte_is_refused_not_restored_as_the_home(tmp_path: Path) -> None:
    info, name, _files = _archived_home(tmp_path)
    damaged = bytearray(tarball_path(info.layout, name).read_bytes())
    damaged[len(damaged) // 2] ^= 0x01  # inside a file's stored bytes: only the CRC tells
    _refused_and_kept(info, name, bytes(damaged))


def test_an_archive_cut_short_is_refused_not_half_restored(tmp_path: Path) -> None:
    info, name, _files = _archived_home(tmp_path)
    tar = gzip.decompress(tarball_path(info.layout, name).read_bytes())
    with tarfile.open(fileobj=io.BytesIO(tar)) as whole:
        third = whole.getmembers()[3].offset
    # a tar stream that stops inside a header (tar killed in ``tar c | gzip``): the gzip
    # stream around it is whole, so only the missing end-of-archive blocks tell
    _refused_and_kept(info, name, gzip.compress(tar[: third + 100]))


def test_an_archive_missing_its_gzip_trailer_is_refused(tmp_path: Path) -> None:
    info, name, _files = _archived_home(tmp_path)
    whole = tarball_path(info.layout, name).read_bytes()
    _refused_and_kept(info, name, whole[:-8])  # no CRC and length: nothing vouches for it


def test_a_whole_archive_still_comes_back(tmp_path: Path) -> None:
    info, name, files = _archived_home(tmp_path)
    restore_home(info, name)
    home = info.layout.home(name)
    assert {f: (home / f).read_bytes() for f in sorted(os.listdir(home))} == files
    assert not tarball_path(info.layout, name).exists()


@needs_root
def test_a_restored_file_never_runs_as_someone_else(tmp_path: Path) -> None:
    """An archive from elsewhere (a backup, another host) is restored by root, which keeps
    every member's owner and mode: a root-owned setuid file, or a setgid one of the
    operators' group, in a home the conversation runs programs from would give it root, or
    every other conversation's files. A conversation can make neither itself (the kernel
    drops the set-id bits a plain account sets for another's group), so a restore drops
    them from files; a directory's setgid (homes are 2750) stays."""
    info = init_root(tmp_path / "r")
    name = naming.home_name("web:setid")
    operators = info.operator_gid
    members = [
        (name, tarfile.DIRTYPE, 0o2750, CONV_UID, operators, b""),
        (f"{name}/rootshell", tarfile.REGTYPE, 0o4755, 0, 0, b"#!/bin/sh\n"),
        (f"{name}/opsshell", tarfile.REGTYPE, 0o2755, CONV_UID, operators, b"#!/bin/sh\n"),
        (f"{name}/notes.md", tarfile.REGTYPE, 0o640, CONV_UID, operators, b"notes\n"),
        (f"{name}/workspace", tarfile.DIRTYPE, 0o2750, CONV_UID, operators, b""),
    ]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, kind, mode, uid, gid, data in members:
            member = tarfile.TarInfo(path)
            member.type, member.mode, member.uid, member.gid = kind, mode, uid, gid
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    tarball_path(info.layout, name).write_bytes(buf.getvalue())
    restore_home(info, name)
    home = info.layout.home(name)
    modes = {p: os.lstat(home / p).st_mode & 0o7777 for p in ("rootshell", "opsshell")}
    assert modes == {"rootshell": 0o755, "opsshell": 0o755}, {k: oct(v) for k, v in modes.items()}
    assert os.lstat(home / "notes.md").st_mode & 0o7777 == 0o640
    assert os.lstat(home / "rootshell").st_uid == 0  # the owner is kept; only its power goes
    for directory in (home, home / "workspace"):
        assert os.lstat(directory).st_mode & 0o7777 == 0o2750


def test_a_restore_cut_off_by_a_crash_leaves_no_copy_behind_for_ever(tmp_path: Path) -> None:
    """The gateway restores a home when its conversation writes again; stopped meanwhile
    (a restart during a deploy), the restore's staging directory, a partial copy of the
    home, stayed hidden in chats/ for ever. The next restore of that home clears it (the
    home's lock is held: no restore of it runs elsewhere), and no other home's."""
    info, name, files = _archived_home(tmp_path)
    chats = info.layout.chats
    crashed = Path(tempfile.mkdtemp(prefix=f".restore-{name}.", dir=chats))
    (crashed / name).mkdir()
    (crashed / name / "f0.bin").write_bytes(files["f0.bin"][:1000])
    other = naming.home_name("web:other")
    others = Path(tempfile.mkdtemp(prefix=f".restore-{other}.", dir=chats))  # its own lock
    restore_home(info, name)
    assert sorted(os.listdir(chats)) == sorted([name, others.name])
