"""Packing a home into its tarball: the walk over hostile ground, and the tarball's file.

Split out of :mod:`provisioning.archive` (the archive's entry points, which say in what
order the steps run and why). The walk treats the home as hostile ground: it works on
directory descriptors opened with ``O_NOFOLLOW`` and never follows a link (a link is
stored as a link), stores numeric owners and exact modes (setgid included), leaves out
what no home needs back (sockets, FIFOs, devices) and hard links to other accounts'
files, and refuses a home nested deeper than :data:`MAX_PACK_DEPTH`. Files with holes are
packed by their data (:mod:`provisioning.archive_sparse`).

The tarball is written to a temp file (``archive/.<name>.XXXXXXXX.tmp``), flushed and
renamed over ``archive/<name>.tar.gz`` (:func:`write_tarball`); the packed home then leaves
``chats/`` in one rename before it is deleted (:func:`remove_packed`).
"""

from __future__ import annotations

import errno
import gzip
import logging
import os
import shutil
import stat
import tarfile
import tempfile
from pathlib import Path
from typing import IO

from . import pinned
from .archive_cleanup import TMP_SUFFIX, quiet, trash_prefix
from .archive_sparse import SparseData, SparseLimits, data_extents, sparse_info
from .errors import ArchiveError, ProvisioningError
from .layout import ARCHIVE_DIR, Layout, RootInfo
from .modes import ARCHIVE_DIR_MODE, STATE_FILE_MODE
from .safefs import fsync_dir

log = logging.getLogger("provisioning.archive")  # the archive's log, as before the split

MAX_PACK_DEPTH = 512  # directory levels below the home; a deeper home is not archived
NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # a tarball that cannot be written whole
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_archive_dir(root: RootInfo) -> int:
    """Open (creating or repairing) ``<root>/archive``: 2750 gateway:O. Caller closes it."""
    with pinned.opened_dir(root.layout.root) as root_fd:
        return pinned.ensure_dir(root_fd, ARCHIVE_DIR, ARCHIVE_DIR_MODE, None, root.operator_gid)


def _info(arcname: str, st: os.stat_result) -> tarfile.TarInfo:
    info = tarfile.TarInfo(arcname)
    info.mode = stat.S_IMODE(st.st_mode)
    info.uid, info.gid = st.st_uid, st.st_gid
    info.uname = info.gname = ""  # numeric owners only: names may differ on restore
    info.mtime = int(st.st_mtime)
    return info


def pack_dir(
    tar: tarfile.TarFile,
    dir_fd: int,
    arcname: str,
    skipped: list[str],
    limits: SparseLimits,
    depth: int = 0,
    owner: int | None = None,
) -> int:
    """Add the entries of the directory ``dir_fd`` under ``arcname``; returns how many.

    A hard link to another account's file (``owner``: the home's) is left out: the tarball
    is the operators' to read, and the file was not (a root-only file the conversation
    linked in where the kernel allows it). Its other name keeps the file.

    One open descriptor per level: a home nested deeper than :data:`MAX_PACK_DEPTH` is
    refused (ArchiveError) and stays where it is, rather than running out of stack.
    """
    if depth > MAX_PACK_DEPTH:
        raise ArchiveError(
            f"{arcname} is nested more than {MAX_PACK_DEPTH} directories deep; the home was "
            "not archived (flatten or remove that tree, then archive again)"
        )
    count = 0
    for entry in sorted(os.listdir(dir_fd)):
        arc = f"{arcname}/{entry}"
        try:
            st = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError as exc:  # its directory listable but not searchable (chmod 0400)
            raise _unreadable(arc, exc) from exc
        if stat.S_ISDIR(st.st_mode):
            try:
                child = pinned.open_dir(entry, dir_fd)
            except (ProvisioningError, FileNotFoundError):
                skipped.append(arc)  # swapped for a link or removed while we looked
                continue
            except OSError as exc:  # chmod 000 by its owner, when the gateway is not root
                raise _unreadable(arc, exc) from exc
            try:
                tar.addfile(dir_info(arc, child))
                count += 1 + pack_dir(tar, child, arc, skipped, limits, depth + 1, owner)
            finally:
                os.close(child)
        elif stat.S_ISREG(st.st_mode):
            try:
                fd = os.open(entry, FILE_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOENT):
                    # unreadable (chmod 000 by its owner, when the gateway is not root):
                    # skipped, it would be deleted with the home, in no tarball
                    raise _unreadable(arc, exc) from exc
                skipped.append(arc)  # a link now (ELOOP) or gone
                continue
            with os.fdopen(fd, "rb") as fh:
                fst = os.fstat(fd)
                if not stat.S_ISREG(fst.st_mode) or (
                    owner is not None and fst.st_uid != owner and fst.st_nlink > 1
                ):
                    skipped.append(arc)
                    continue
                info = _info(arc, fst)
                info.type = tarfile.REGTYPE
                extents = data_extents(fd, fst, arc, limits)
                if extents is None:
                    info.size = fst.st_size
                    tar.addfile(info, Exactly(fh, fst.st_size))
                else:
                    data = SparseData(fd, extents, fst.st_size)
                    sparse_info(info, fst.st_size, data.size)
                    tar.addfile(info, data)
                count += 1
        elif stat.S_ISLNK(st.st_mode):
            info = _info(arc, st)
            info.type = tarfile.SYMTYPE
            info.linkname = os.readlink(entry, dir_fd=dir_fd)
            tar.addfile(info)
            count += 1
        else:  # sockets, FIFOs, devices: nothing a home needs back
            skipped.append(arc)
    return count


def _unreadable(arc: str, exc: OSError) -> ArchiveError:
    return ArchiveError(
        f"cannot read {arc} ({exc.strerror or exc}); the home was not archived and is left as "
        "it is: make it readable by the gateway's account (or remove it), then archive again"
    )


def dir_info(arcname: str, fd: int) -> tarfile.TarInfo:
    info = _info(arcname, os.fstat(fd))
    info.type = tarfile.DIRTYPE
    return info


class Exactly:
    """A file object giving exactly ``size`` bytes (a file that grows or shrinks meanwhile
    must not corrupt the archive: shorter is padded with zeros, longer is cut)."""

    def __init__(self, fh: IO[bytes], size: int) -> None:
        self.fh, self.left = fh, size

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        want = self.left if n < 0 else min(n, self.left)
        data = self.fh.read(want)
        if len(data) < want:
            data += b"\0" * (want - len(data))
        self.left -= len(data)
        return data


def write_tarball(
    root: RootInfo,
    name: str,
    home: Path,
    target: Path,
    skipped: list[str],
    limits: SparseLimits,
) -> int:
    """Pack ``home`` into ``target`` by way of a temp file in ``archive/`` (``gateway:O``
    ``0640``), flushed before it is renamed into place; returns how many members it has.
    What was left out is added to ``skipped``. A temp file that is not renamed is deleted;
    a disk found full says which tarball it could not write."""
    layout = root.layout
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=TMP_SUFFIX, dir=layout.archive)
    try:
        os.fchown(fd, -1, root.operator_gid)
        os.fchmod(fd, STATE_FILE_MODE)
        with os.fdopen(fd, "wb") as raw:
            with (
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz,
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
                pinned.opened_dir(home) as home_fd,
            ):
                tar.addfile(dir_info(name, home_fd))
                owner = os.fstat(home_fd).st_uid
                members = 1 + pack_dir(tar, home_fd, name, skipped, limits, owner=owner)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        with quiet():
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None and exc.errno in NO_ROOM:
            # a write to the tarball: say which, so which disk is full
            raise OSError(
                exc.errno,
                f"{exc.strerror}: no room to write {target}; the home is left as it is",
            ) from exc
        raise
    return members


def remove_packed(layout: Layout, name: str, home: Path) -> None:
    """Take the packed home out of ``chats/`` in one rename, then delete it.

    The rename is the moment the home is archived (its directory gone, its tarball whole).
    Deleting in place could stop half-way (a leftover process of the conversation still
    writing into it) and leave a gutted home that the next start would take for a live one
    while its files sat in a tarball nothing restores; now a failed delete leaves only a
    hidden directory, named in a warning.
    """
    trash = Path(tempfile.mkdtemp(prefix=trash_prefix(name), dir=layout.chats))
    os.rename(home, trash / name)
    fsync_dir(layout.chats)
    try:
        shutil.rmtree(trash)  # fd-based on Linux: never follows a link out of the home
    except OSError as exc:
        log.warning(
            "archived %s, but %s could not be removed (%s); remove it by hand", name, trash, exc
        )
