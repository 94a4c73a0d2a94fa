"""Packing an idle home into ``<root>/archive/`` and bringing it back, owners and modes intact.

Homes of conversations nobody has written to in months only take space. Archiving packs
one into ``<root>/archive/<home>.tar.gz`` (``gateway:O`` ``0640`` in a ``2750`` directory)
with numeric owners and exact modes (setgid included), then removes the directory. The
caller may then give the conversation's account back (``after``, run under the home's lock
once the directory is gone: :mod:`provisioning.reclaim`); at restore the files of the old
uid and private group go to the account the conversation has now (:class:`Reowning`),
every other owner (the operators' group, root) stays as stored.

This module holds the two operations and the order of their steps; the steps are their own
modules: packing (:mod:`provisioning.archive_write`), unpacking
(:mod:`provisioning.archive_restore`), files with holes both ways
(:mod:`provisioning.archive_sparse`), the per-home lock (:mod:`provisioning.archive_lock`)
and what a crash leaves behind (:mod:`provisioning.archive_cleanup`). The names other code
uses are all importable from here (``__all__``).

Both directions treat the home as hostile ground: the walk that packs it works on
directory descriptors opened with ``O_NOFOLLOW`` and never follows a link (a link is
stored as a link); unpacking refuses members that would land outside the home (absolute
names, ``..``, links pointing out, devices, FIFOs, hard links; files lose set-id bits) and
extracts into a private staging directory that is renamed into place only when complete and
flushed (files and directories), and only then is the tarball deleted; an archive that is
cut short, garbled or fails gzip's CRC is refused whole and kept (the tarball is the home's
only copy). The tarball is written to a temp file, flushed and renamed, and the packed home leaves
``chats/`` in one rename before it is deleted, so a crash (or a delete that fails half-way)
leaves the home or a whole archive.

A file with holes (``truncate -s 1T`` costs a conversation nothing) is packed by its data
only, as a GNU sparse member, and restored with its holes
(:mod:`provisioning.archive_sparse`), so the cost of packing follows the data, not the
apparent size. A file with more extents than :data:`MAX_SPARSE_EXTENTS` (the map is held
in memory) has its smallest holes packed as zeros until the map fits; one that would need
more than :data:`MAX_FILLED_ZEROS` of zeros for that (a file made to be as fragmented as
it can) leaves its home unarchived, with an error naming it, rather than reading terabytes
of holes. The limits are set here and handed to the packer at each archiving.

A lock per home (``state/home-locks/<home>``, :func:`home_lock`) keeps an archive of that
home from racing its restore, its being built or a run starting in it: archiving and
restoring hold it exclusively, :meth:`Homes.ensure` and :meth:`Homes.present` shared. Per
home, not one for the root: packing a big home takes minutes, and every other
conversation's next message must still get its home meanwhile. This module knows nothing
about chat; whether a home is busy is the caller's question.
"""

from __future__ import annotations

import logging
import os
import stat
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .archive_cleanup import (
    remove_crashed_archives,
    remove_crashed_deletes,
    remove_crashed_restores,
)
from .archive_lock import home_lock
from .archive_restore import Reowning, safe_parts, unpack_into_place
from .archive_sparse import SparseLimits, SparseSafeInfo
from .archive_write import open_archive_dir, remove_packed, write_tarball
from .errors import ArchiveError
from .layout import Layout, RootInfo
from .safefs import fsync_dir

__all__ = [
    "MAX_FILLED_ZEROS",
    "MAX_SCANNED_EXTENTS",
    "MAX_SPARSE_EXTENTS",
    "SUFFIX",
    "ArchiveResult",
    "archive_home",
    "archived_owner",
    "is_archived",
    "restore_home",
    "restore_if_archived",
    "tarball_path",
]

log = logging.getLogger(__name__)

SUFFIX = ".tar.gz"
MAX_SPARSE_EXTENTS = 1 << 16  # extents of one file stored sparse (its map is in memory: ~10 MB)
# a file with more extents is packed with its smallest holes filled in (read as zeros) until
# its map fits; found with more than this many, or when filling in would read more zeros
# than this, the home is not archived (ArchiveError): either would cost hours
MAX_SCANNED_EXTENTS = 1 << 20
MAX_FILLED_ZEROS = 1 << 30


@dataclass(frozen=True)
class ArchiveResult:
    home: str
    tarball: Path
    size_bytes: int
    members: int
    skipped: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {
            "home": self.home,
            "tarball": str(self.tarball),
            "sizeBytes": self.size_bytes,
            "members": self.members,
            "skipped": list(self.skipped),
        }


def tarball_path(layout: Layout, name: str) -> Path:
    layout.home(name)  # refuses a name that is not a plain home directory name
    return layout.archive / f"{name}{SUFFIX}"


def archived_owner(layout: Layout, name: str) -> int | None:
    """The uid that owned home ``name`` when it was packed (its tarball's first member, the
    home itself), or None when the tarball is missing or does not start with it."""
    try:
        with tarfile.open(tarball_path(layout, name), mode="r:gz", tarinfo=SparseSafeInfo) as tar:
            first = tar.next()
    except (tarfile.TarError, EOFError, OSError, ArchiveError):
        return None
    if first is None or not first.isdir() or safe_parts(first, name) != []:
        return None
    return first.uid


def is_archived(layout: Layout, name: str) -> bool:
    """True when the home is packed away (its tarball exists and its directory does not)."""
    return not os.path.lexists(layout.home(name)) and tarball_path(layout, name).exists()


def _sparse_limits() -> SparseLimits:
    """The limits of this module, read at each archiving (tests lower them here)."""
    return SparseLimits(MAX_SPARSE_EXTENTS, MAX_SCANNED_EXTENTS, MAX_FILLED_ZEROS)


def archive_home(
    root: RootInfo,
    name: str,
    check: Callable[[], None] | None = None,
    after: Callable[[], None] | None = None,
) -> ArchiveResult:
    """Pack ``chats/<name>`` into ``archive/<name>.tar.gz``, then remove the directory.

    Blocking: run it off the event loop. ``check`` runs under the archive lock before
    anything is touched and raises to refuse (the caller's "is this conversation idle":
    no run in flight, nothing queued, no pending prompt). A home being built waits for the
    lock, so one checked idle here stays idle until it is packed away. ``after`` runs under
    the lock too, once the tarball is whole and the directory has left ``chats/`` (the
    account's reclaim); what it raises is raised, the home archived all the same.
    """
    layout = root.layout
    home = layout.home(name)
    target = tarball_path(layout, name)
    with home_lock(root, name, exclusive=True):
        if check is not None:
            check()
        try:
            st = os.lstat(home)
        except FileNotFoundError:
            if target.exists():
                raise ArchiveError(f"{home} is already archived in {target}") from None
            raise ArchiveError(f"{home} does not exist; nothing to archive") from None
        if not stat.S_ISDIR(st.st_mode):
            raise ArchiveError(f"{home} is a link or not a directory; refusing to archive it")
        skipped: list[str] = []
        dir_fd = open_archive_dir(root)
        try:
            remove_crashed_archives(layout, name)
            remove_crashed_deletes(layout, name)
            members = write_tarball(root, name, home, target, skipped, _sparse_limits())
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        size = target.stat().st_size
        remove_packed(layout, name, home)
        if after is not None:
            after()
    for path in skipped:
        log.warning("archiving %s: %s skipped (not a file, directory or link)", name, path)
    log.info(
        "archived home %s (%d entries) to %s (%d bytes) and removed the directory",
        home,
        members,
        target,
        size,
    )
    return ArchiveResult(name, target, size, members, tuple(skipped))


def restore_home(
    root: RootInfo, name: str, owner: Callable[[], Reowning | None] | None = None
) -> ArchiveResult:
    """Unpack ``archive/<name>.tar.gz`` back to ``chats/<name>`` and remove the tarball.

    Blocking: run it off the event loop. Members that would escape the home are refused
    (logged, not extracted); the rest comes back with its owners and modes. ``owner`` is
    asked under the home's lock, before anything is unpacked, whose the archived account's
    files become (it makes the conversation's account when it has none); None keeps the
    owners as stored.
    """
    layout = root.layout
    home = layout.home(name)
    source = tarball_path(layout, name)
    with home_lock(root, name, exclusive=True):
        if os.path.lexists(home):
            raise ArchiveError(f"{home} exists; move it away before restoring {source}")
        if not source.is_file():
            raise ArchiveError(f"no archive of {name} at {source}")
        remove_crashed_restores(layout, name)
        remove_crashed_deletes(layout, name)
        ids = owner() if owner is not None else None
        refused = unpack_into_place(layout, name, source, ids)
        size = source.stat().st_size
        os.unlink(source)
        fsync_dir(layout.archive)
    for member in refused:
        log.warning("restoring %s: refused member %r (it would leave the home)", name, member)
    log.info("restored home %s from %s", home, source)
    return ArchiveResult(name, source, size, 0, tuple(refused))


def restore_if_archived(
    root: RootInfo, name: str, owner: Callable[[], Reowning | None] | None = None
) -> bool:
    """Restore ``name`` when it is archived and its directory is gone; True if it was.
    ``owner``: as for :func:`restore_home`."""
    if not is_archived(root.layout, name):
        return False
    try:
        restore_home(root, name, owner)
    except ArchiveError:
        if os.path.lexists(root.layout.home(name)):
            return False  # someone else restored it meanwhile
        raise
    return True
