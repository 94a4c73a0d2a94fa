"""Unpacking a home's tarball back into ``chats/``, refusing whatever would leave the home.

Split out of :mod:`provisioning.archive` (the archive's entry points, which say in what
order the steps run and why). The tarball is treated as hostile: members that would land
outside the home are refused (absolute names, ``..``, links pointing out, devices, FIFOs,
hard links; files lose set-id bits), and everything is extracted into a private staging
directory (``chats/.restore-<home>.XXXXXXXX``) that is renamed into place only when complete
and flushed, files and directories (:func:`unpack_into_place`). An archive that is cut
short, garbled or fails gzip's CRC is refused whole (:func:`read_to_the_end`). The files of
the archived account go to the account the conversation has now (:class:`Reowning`).
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

from . import pinned
from .archive_cleanup import staging_prefix
from .archive_sparse import COPY_CHUNK, SparseSafeInfo, write_with_holes
from .errors import ArchiveError
from .layout import Layout
from .safefs import fsync_dir

# a restored file's mode: never setuid or setgid. Root restores with each member's owner, so
# an archive from elsewhere could put a root-owned setuid file, or a setgid one of the
# operators' group, where the conversation runs programs; it cannot make either itself
# (the kernel drops set-id bits a plain account sets for another's group). Directories keep
# theirs: a home's setgid is how its files land in the operators' group.
FILE_MODE_BITS = 0o1777


@dataclass(frozen=True)
class Reowning:
    """Whose a restored home's files become: the archived account's uid and private gid
    (``old_uid``, ``old_gid``) are replaced by the account's it has now; any other owner
    or group in the tarball stays as stored."""

    old_uid: int
    old_gid: int
    uid: int
    gid: int

    def owner(self, uid: int, gid: int) -> tuple[int, int]:
        return (
            self.uid if uid == self.old_uid else uid,
            self.gid if gid == self.old_gid else gid,
        )


def safe_parts(member: tarfile.TarInfo, name: str) -> list[str] | None:
    """The member's path inside the home as parts ([] for the home itself), or None."""
    raw = member.name
    if raw.startswith("/") or "\0" in raw:
        return None
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if not parts or parts[0] != name or any(p == ".." for p in parts):
        return None
    return parts[1:]


def _link_stays_inside(parts: list[str], target: str, home: Path, personas: Path) -> bool:
    if target.startswith("/"):
        normal = posixpath.normpath(target)
        return (
            normal == str(personas)
            or posixpath.dirname(normal) == str(personas)  # one shared persona (.jazz/personas)
            or normal == str(home)
            or normal.startswith(f"{home}/")
        )
    depth = len(parts) - 1  # relative: must never climb above the home
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return False
        elif part not in ("", "."):
            depth += 1
    return True


def _open_parent(base_fd: int, parts: list[str]) -> int:
    fd = os.dup(base_fd)
    try:
        for part in parts[:-1]:
            nxt = pinned.open_dir(part, fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _owner(fd_or_name: int | str, uid: int, gid: int, dir_fd: int | None = None) -> None:
    if os.geteuid() != 0:
        return  # without root everything stays the gateway's own (single-account homes)
    if isinstance(fd_or_name, int):
        os.fchown(fd_or_name, uid, gid)
    else:
        os.chown(fd_or_name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)


def _extract(
    tar: tarfile.TarFile,
    staging_fd: int,
    name: str,
    layout: Layout,
    ids: Reowning | None = None,
) -> list[str]:
    """Unpack into ``staging_fd``/<name>; returns the refused members. ``ids``: the files
    of the archived account go to the account the home has now."""
    home, refused, dirs = layout.home(name), [], []

    def owner(member: tarfile.TarInfo) -> tuple[int, int]:
        return (member.uid, member.gid) if ids is None else ids.owner(member.uid, member.gid)

    for member in tar:
        parts = safe_parts(member, name)
        if parts is None:
            refused.append(member.name)
            continue
        rel = [name, *parts]
        if member.isdir():
            parent = _open_parent(staging_fd, rel)
            try:
                os.mkdir(rel[-1], 0o700, dir_fd=parent)
            except FileExistsError:
                pass
            finally:
                os.close(parent)
            dirs.append((rel, member))
        elif member.isreg():
            src = tar.extractfile(member)
            if src is None:
                refused.append(member.name)
                continue
            parent = _open_parent(staging_fd, rel)
            try:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                fd = os.open(rel[-1], flags, 0o600, dir_fd=parent)
            finally:
                os.close(parent)
            with os.fdopen(fd, "wb") as out:
                write_with_holes(src, out, member)
                out.flush()
                _owner(fd, *owner(member))
                os.fchmod(fd, member.mode & FILE_MODE_BITS)
                os.utime(fd, (member.mtime, member.mtime))
                os.fsync(fd)  # on disk before the tarball is deleted
        elif (
            member.issym()
            and parts
            and _link_stays_inside(parts, member.linkname, home, layout.personas)
        ):
            parent = _open_parent(staging_fd, rel)
            try:
                os.symlink(member.linkname, rel[-1], dir_fd=parent)
                _owner(rel[-1], *owner(member), dir_fd=parent)
            finally:
                os.close(parent)
        else:  # links pointing out, hard links, devices, FIFOs
            refused.append(member.name)
    # Directories last, deepest first: owner, then mode (setgid survives), then times, then
    # flushed (their entries). Opened one component at a time: a path longer than PATH_MAX
    # is fine in a home, so it must be fine here.
    for rel, member in reversed(dirs):
        parent = _open_parent(staging_fd, rel)
        try:
            fd = pinned.open_dir(rel[-1], parent)
        finally:
            os.close(parent)
        try:
            _owner(fd, *owner(member))
            os.fchmod(fd, member.mode & 0o7777)
            os.utime(fd, (member.mtime, member.mtime))
            os.fsync(fd)
        finally:
            os.close(fd)
    return refused


def read_to_the_end(tar: tarfile.TarFile) -> None:
    """Read the compressed stream past the tar's end, so gzip checks its CRC and length:
    tarfile stops at the end-of-archive blocks, and a flipped bit inside a file's bytes
    would otherwise come back as the home's (and its only copy, the tarball, be deleted)."""
    stream = cast(IO[bytes], tar.fileobj)
    while stream.read(COPY_CHUNK):
        pass


def unpack_into_place(layout: Layout, name: str, source: Path, ids: Reowning | None) -> list[str]:
    """Unpack ``source`` into a staging directory in ``chats/``, then rename its home into
    place, flushed; returns the refused members. The staging directory goes either way; an
    ArchiveError (the tarball damaged, or no home in it) leaves nothing in ``chats/``."""
    staging = Path(tempfile.mkdtemp(prefix=staging_prefix(name), dir=layout.chats))
    try:
        with pinned.opened_dir(staging) as staging_fd:
            try:
                with tarfile.open(source, mode="r:gz", tarinfo=SparseSafeInfo) as tar:
                    refused = _extract(tar, staging_fd, name, layout, ids)
                    read_to_the_end(tar)
            except (tarfile.TarError, EOFError, OSError, ArchiveError) as exc:
                raise ArchiveError(f"cannot unpack {source}: {exc}") from exc
        if not os.path.isdir(staging / name):
            raise ArchiveError(f"{source} holds no directory {name}/; left it untouched")
        os.rename(staging / name, layout.home(name))
        fsync_dir(layout.chats)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return refused
