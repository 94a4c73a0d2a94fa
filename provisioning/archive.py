"""Packing an idle home into ``<root>/archive/`` and bringing it back, owners and modes intact.

Homes of conversations nobody has written to in months only take space. Archiving packs
one into ``<root>/archive/<home>.tar.gz`` (``gateway:O`` ``0640`` in a ``2750`` directory)
with numeric owners and exact modes (setgid included), then removes the directory. The
caller may then give the conversation's account back (``after``, run under the home's lock
once the directory is gone: :mod:`provisioning.reclaim`); at restore the files of the old
uid and private group go to the account the conversation has now (:class:`Reowning`),
every other owner (the operators' group, root) stays as stored.

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
only: a file whose allocated blocks are fewer than its size is read extent by extent
(``SEEK_DATA``/``SEEK_HOLE``) and stored as a GNU sparse member (format 1.0, in PAX
headers: the extent map, then the data), which ``tarfile`` and GNU tar both read, so the
cost of packing follows the data, not the apparent size. Restoring writes a sparse member's
extents and truncates it to its size, so holes stay holes; any other file's all-zero
stretches of :data:`COPY_CHUNK` are skipped too (holes; the same bytes), which also keeps
an archive made before this from filling the disk. A file with more extents than
:data:`MAX_SPARSE_EXTENTS` (the map is held in memory) has its smallest holes packed as
zeros until the map fits; one that would need more than :data:`MAX_FILLED_ZEROS` of
zeros for that (a file made to be as fragmented as it can) leaves its home unarchived,
with an error naming it, rather than reading terabytes of holes.

A lock per home (``state/home-locks/<home>``) keeps an archive of that home from racing its
restore, its being built or a run starting in it: archiving and restoring hold it
exclusively, :meth:`Homes.ensure` and :meth:`Homes.present` shared. Per home, not one for
the root: packing a big home takes minutes, and every other conversation's next message
must still get its home meanwhile. (The lock files live in ``state/``, not in
``archive/``, which holds tarballs only; one empty file per home, never removed, since
removing a lock file another process may have open is a race.) This module knows nothing
about chat; whether a home is busy is the caller's question.
"""

from __future__ import annotations

import errno
import fcntl
import gzip
import logging
import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

from . import pinned
from .errors import ProvisioningError
from .layout import ARCHIVE_DIR, Layout, RootInfo
from .modes import ARCHIVE_DIR_MODE, LOCKS_DIR_MODE, STATE_FILE_MODE
from .safefs import fsync_dir

log = logging.getLogger(__name__)

SUFFIX = ".tar.gz"
LOCKS_DIR = "home-locks"  # in <root>/state: one lock file per home (see the module docstring)
COPY_CHUNK = 1024 * 1024
ZEROS = bytes(COPY_CHUNK)
MAX_SPARSE_EXTENTS = 1 << 16  # extents of one file stored sparse (its map is in memory: ~10 MB)
# a file with more extents is packed with its smallest holes filled in (read as zeros) until
# its map fits; found with more than this many, or when filling in would read more zeros
# than this, the home is not archived (ArchiveError): either would cost hours
MAX_SCANNED_EXTENTS = 1 << 20
MAX_FILLED_ZEROS = 1 << 30
SPARSE_DIR = "GNUSparseFile.0"  # GNU tar's header name for a sparse member (the real one in PAX)
MAX_PACK_DEPTH = 512  # directory levels below the home; a deeper home is not archived
STAGING_SUFFIX_CHARS = 8  # what tempfile.mkdtemp/mkstemp put after a staging prefix
TMP_SUFFIX = ".tmp"  # a tarball being written (archive/.<name>.XXXXXXXX.tmp)
NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # a tarball that cannot be written whole
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# a restored file's mode: never setuid or setgid. Root restores with each member's owner, so
# an archive from elsewhere could put a root-owned setuid file, or a setgid one of the
# operators' group, where the conversation runs programs; it cannot make either itself
# (the kernel drops set-id bits a plain account sets for another's group). Directories keep
# theirs: a home's setgid is how its files land in the operators' group.
FILE_MODE_BITS = 0o1777


class ArchiveError(ProvisioningError):
    """A home cannot be archived or restored as things stand; the message says why."""


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
        with tarfile.open(tarball_path(layout, name), mode="r:gz", tarinfo=_SparseSafeInfo) as tar:
            first = tar.next()
    except (tarfile.TarError, EOFError, OSError, ArchiveError):
        return None
    if first is None or not first.isdir() or _safe_parts(first, name) != []:
        return None
    return first.uid


def is_archived(layout: Layout, name: str) -> bool:
    """True when the home is packed away (its tarball exists and its directory does not)."""
    return not os.path.lexists(layout.home(name)) and tarball_path(layout, name).exists()


def _archive_dir(root: RootInfo) -> int:
    """Open (creating or repairing) ``<root>/archive``: 2750 gateway:O. Caller closes it."""
    with pinned.opened_dir(root.layout.root) as root_fd:
        return pinned.ensure_dir(root_fd, ARCHIVE_DIR, ARCHIVE_DIR_MODE, None, root.operator_gid)


def _locks_dir(root: RootInfo) -> int:
    """Open (creating or repairing) ``<root>/state/home-locks``: 2750 gateway:O."""
    with pinned.opened_dir(root.layout.state) as state_fd:
        return pinned.ensure_dir(state_fd, LOCKS_DIR, LOCKS_DIR_MODE, None, root.operator_gid)


@contextmanager
def home_lock(root: RootInfo, name: str, *, exclusive: bool) -> Iterator[None]:
    """Hold home ``name``'s lock: exclusive to archive or restore it, shared to build it or
    start a run in it. Homes other than ``name`` are not held up."""
    lock_name = root.layout.home(name).name  # refuses a name that is not a home's
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:  # state/ is the gateway's own (2750): no conversation can plant a link in it
        fd = os.open(root.layout.state / LOCKS_DIR / lock_name, flags, STATE_FILE_MODE)
    except FileNotFoundError:  # the first lock taken on this root
        dir_fd = _locks_dir(root)
        try:
            fd = os.open(lock_name, flags, STATE_FILE_MODE, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


# -- packing -----------------------------------------------------------------------------------


def _info(arcname: str, st: os.stat_result) -> tarfile.TarInfo:
    info = tarfile.TarInfo(arcname)
    info.mode = stat.S_IMODE(st.st_mode)
    info.uid, info.gid = st.st_uid, st.st_gid
    info.uname = info.gname = ""  # numeric owners only: names may differ on restore
    info.mtime = int(st.st_mtime)
    return info


def _pack_dir(
    tar: tarfile.TarFile,
    dir_fd: int,
    arcname: str,
    skipped: list[str],
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
                tar.addfile(_dir_info(arc, child))
                count += 1 + _pack_dir(tar, child, arc, skipped, depth + 1, owner)
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
                extents = _data_extents(fd, fst, arc)
                if extents is None:
                    info.size = fst.st_size
                    tar.addfile(info, _Exactly(fh, fst.st_size))
                else:
                    data = _SparseData(fd, extents, fst.st_size)
                    _sparse_info(info, fst.st_size, data.size)
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


def _dir_info(arcname: str, fd: int) -> tarfile.TarInfo:
    info = _info(arcname, os.fstat(fd))
    info.type = tarfile.DIRTYPE
    return info


def _data_extents(fd: int, st: os.stat_result, arc: str) -> list[tuple[int, int]] | None:
    """The (offset, length) runs of data of a file with holes, or None to store it whole.

    Only a file with fewer allocated bytes than its size can have holes; the extents are
    found with ``SEEK_DATA``/``SEEK_HOLE`` (a filesystem without them reports one extent,
    the whole file). A file that ends in a hole gets GNU tar's closing ``(size, 0)``.
    """
    if st.st_blocks * 512 >= st.st_size:
        return None
    try:
        return _seek_extents(fd, st.st_size, arc)
    finally:
        os.lseek(fd, 0, os.SEEK_SET)  # stored whole after all: read from the start


def _seek_extents(fd: int, size: int, arc: str) -> list[tuple[int, int]] | None:
    """:func:`_data_extents`' walk; it moves the file's offset, which the caller resets."""
    extents: list[tuple[int, int]] = []
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole from pos on
                break
            return None  # no SEEK_DATA here: read it all, as before
        if start >= size:
            break
        try:
            end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        except OSError as exc:  # truncated meanwhile (a process the run left behind)
            raise ArchiveError(f"{arc} changed while it was packed: {exc}") from exc
        extents.append((start, end - start))
        if len(extents) > MAX_SCANNED_EXTENTS:
            raise ArchiveError(
                f"{arc} has more than {MAX_SCANNED_EXTENTS:,} separate runs of data: a file "
                "this fragmented cannot be packed in reasonable time; the home is left as it is"
            )
        pos = end
    if extents == [(0, size)]:
        return None  # no hole after all (a compressed filesystem's block count)
    if len(extents) > MAX_SPARSE_EXTENTS:
        extents = _filled_in(extents, MAX_SPARSE_EXTENTS, arc)
    if not extents or sum(extents[-1]) < size:
        extents.append((size, 0))
    return extents


def _filled_in(extents: list[tuple[int, int]], most: int, arc: str) -> list[tuple[int, int]]:
    """``extents`` merged into at most ``most`` by filling in their smallest holes (packed as
    the zeros they read as; restored as holes again, a MiB at a time)."""
    gaps = sorted(
        range(len(extents) - 1),
        key=lambda i: extents[i + 1][0] - sum(extents[i]),
    )[: len(extents) - most]
    zeros = sum(extents[i + 1][0] - sum(extents[i]) for i in gaps)
    if zeros > MAX_FILLED_ZEROS:
        raise ArchiveError(
            f"{arc} has {len(extents):,} separate runs of data; packing it would read "
            f"{zeros:,} bytes of holes as zeros: the home is left as it is"
        )
    log.info(
        "archiving %s: %d runs of data; %d of its smallest holes (%d bytes) packed as zeros",
        arc,
        len(extents),
        len(gaps),
        zeros,
    )
    filled = set(gaps)
    merged: list[tuple[int, int]] = []
    for i, (start, length) in enumerate(extents):
        if i - 1 in filled:  # the hole before it is filled in: one run with the previous
            prev_start, _ = merged[-1]
            merged[-1] = (prev_start, start + length - prev_start)
        else:
            merged.append((start, length))
    return merged


# tarfile's "the end-of-archive blocks" (not in typeshed, hence getattr)
_END_OF_ARCHIVE: type[tarfile.HeaderError] = getattr(tarfile, "EOFHeaderError")  # noqa: B009


class _SparseSafeInfo(tarfile.TarInfo):
    """``tarfile``'s reading of a GNU sparse 1.0 member whose stored size (map and data)
    is 8 GiB or more, fixed: such a member carries a PAX ``size`` record, which ``tarfile``
    applies after ``GNU.sparse.realsize`` (the member's size became the stored size) and
    counts from past the map (the next header was looked for too far on). Here the size is
    the file's and the next header follows the stored data, as GNU tar reads it."""

    def _proc_pax(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        member = cast(tarfile.TarInfo, super()._proc_pax(tar))  # type: ignore[misc]
        headers = member.pax_headers
        if (
            headers.get("GNU.sparse.major") == "1"
            and headers.get("GNU.sparse.minor") == "0"
            and "size" in headers
            and "GNU.sparse.realsize" in headers
        ):
            # the map starts a block past the member's header, which follows this one's
            block = tarfile_block(self.size)
            map_start = self.offset + tarfile_block(1) + block + tarfile_block(1)
            tar.offset = map_start + tarfile_block(int(headers["size"]))
            member.size = int(headers["GNU.sparse.realsize"])
        return member

    @classmethod
    def fromtarfile(cls, tar: tarfile.TarFile) -> _SparseSafeInfo:
        """The next header; a header cut short, empty or garbled is an ArchiveError (tarfile
        ends the listing there without a word, and the home would come back half)."""
        try:
            return super().fromtarfile(tar)
        except _END_OF_ARCHIVE:
            raise  # the end-of-archive blocks: the one right way for the listing to end
        except tarfile.HeaderError as exc:
            raise ArchiveError(
                f"the archive is damaged at byte {tar.offset} of its tar stream ({exc})"
            ) from exc


def tarfile_block(count: int) -> int:
    """``count`` bytes rounded up to whole tar blocks."""
    blocks, rest = divmod(count, tarfile.BLOCKSIZE)
    return (blocks + (1 if rest else 0)) * tarfile.BLOCKSIZE


def _sparse_info(info: tarfile.TarInfo, real_size: int, stored: int) -> None:
    """Make ``info`` a GNU sparse 1.0 member: the header names ``GNUSparseFile.0/<base>``
    (what a tar without sparse support would extract, map included), PAX carries the real
    name and size. ``path`` comes first: of the two, the later record wins on reading."""
    real = info.name
    head, _, base = real.rpartition("/")
    info.pax_headers = {
        "path": f"{head}/{SPARSE_DIR}/{base}",
        "GNU.sparse.major": "1",
        "GNU.sparse.minor": "0",
        "GNU.sparse.name": real,
        "GNU.sparse.realsize": str(real_size),
    }
    info.name = f"{head}/{SPARSE_DIR}/{base}"
    info.size = stored


class _SparseData:
    """A sparse member's data as the tar stream holds it: the extent map (count, then each
    offset and length, one number a line, padded to a block), then each extent's bytes.
    Like :class:`_Exactly`, an extent that shrank meanwhile is padded with zeros."""

    def __init__(self, fd: int, extents: list[tuple[int, int]], real_size: int) -> None:
        numbers = [len(extents), *(n for extent in extents for n in extent)]
        text = "".join(f"{n}\n" for n in numbers).encode()
        self.map = text + bytes(-len(text) % tarfile.BLOCKSIZE)
        self.fd, self.extents = fd, extents
        self.size = len(self.map) + sum(length for _, length in extents)
        self._chunks = self._read_all()
        self._chunk, self._at = b"", 0

    def _read_all(self) -> Iterator[bytes]:
        yield self.map
        for offset, length in self.extents:
            done = 0
            while done < length:
                want = min(COPY_CHUNK, length - done)
                data = os.pread(self.fd, want, offset + done)
                if len(data) < want:
                    data += bytes(want - len(data))
                done += want
                yield data

    def read(self, n: int = -1) -> bytes:
        """``n`` bytes (all that is left when fewer or ``n`` < 0): tarfile wants them whole."""
        parts: list[bytes] = []
        while n != 0:
            if self._at >= len(self._chunk):
                self._chunk, self._at = next(self._chunks, b""), 0
                if not self._chunk:
                    break
            take = len(self._chunk) - self._at if n < 0 else min(n, len(self._chunk) - self._at)
            parts.append(self._chunk[self._at : self._at + take])
            self._at += take
            n = n - take if n > 0 else n
        return b"".join(parts)


class _Exactly:
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
        dir_fd = _archive_dir(root)
        try:
            _remove_crashed_archives(layout, name)
            _remove_crashed_deletes(layout, name)
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
                        tar.addfile(_dir_info(name, home_fd))
                        owner = os.fstat(home_fd).st_uid
                        members = 1 + _pack_dir(tar, home_fd, name, skipped, owner=owner)
                    raw.flush()
                    os.fsync(raw.fileno())
                os.replace(tmp, target)
            except BaseException as exc:
                with _quiet():
                    os.unlink(tmp)
                if isinstance(exc, OSError) and exc.filename is None and exc.errno in NO_ROOM:
                    # a write to the tarball: say which, so which disk is full
                    raise OSError(
                        exc.errno,
                        f"{exc.strerror}: no room to write {target}; the home is left as it is",
                    ) from exc
                raise
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        size = target.stat().st_size
        _remove_packed(layout, name, home)
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


def _remove_packed(layout: Layout, name: str, home: Path) -> None:
    """Take the packed home out of ``chats/`` in one rename, then delete it.

    The rename is the moment the home is archived (its directory gone, its tarball whole).
    Deleting in place could stop half-way (a leftover process of the conversation still
    writing into it) and leave a gutted home that the next start would take for a live one
    while its files sat in a tarball nothing restores; now a failed delete leaves only a
    hidden directory, named in a warning.
    """
    trash = Path(tempfile.mkdtemp(prefix=_trash_prefix(name), dir=layout.chats))
    os.rename(home, trash / name)
    fsync_dir(layout.chats)
    try:
        shutil.rmtree(trash)  # fd-based on Linux: never follows a link out of the home
    except OSError as exc:
        log.warning(
            "archived %s, but %s could not be removed (%s); remove it by hand", name, trash, exc
        )


@contextmanager
def _quiet() -> Iterator[None]:
    try:
        yield
    except FileNotFoundError:
        pass


# -- unpacking ---------------------------------------------------------------------------------


def _safe_parts(member: tarfile.TarInfo, name: str) -> list[str] | None:
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
        parts = _safe_parts(member, name)
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
                _write_with_holes(src, out, member)
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


def _write_with_holes(src: IO[bytes], out: IO[bytes], member: tarfile.TarInfo) -> None:
    """Write ``member``'s bytes to ``out`` leaving holes where it had them.

    A sparse member's extents are written where they belong (``src`` reads its holes as
    zeros; they are never read); of the rest, a whole :data:`COPY_CHUNK` of zeros is
    skipped. The file is then truncated to its size, so a trailing hole is a hole too.
    """
    sparse: list[tuple[int, int]] | None = getattr(member, "sparse", None)  # typeshed: bytes
    extents = sparse if sparse is not None else [(0, member.size)]
    end = 0
    for offset, length in extents:
        if offset < end or length < 0 or offset + length > member.size:
            raise ArchiveError(f"{member.name}: a sparse map out of order or past its size")
        src.seek(offset)
        out.seek(offset)
        left = length
        while left > 0:
            chunk = src.read(min(COPY_CHUNK, left))
            if not chunk:
                raise ArchiveError(f"{member.name}: the archive ends inside its data")
            left -= len(chunk)
            if chunk == ZEROS[: len(chunk)] and len(chunk) == COPY_CHUNK:
                out.seek(len(chunk), os.SEEK_CUR)  # a hole, the same bytes
            else:
                out.write(chunk)
        end = offset + length
    out.truncate(member.size)


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
        _remove_crashed_restores(layout, name)
        _remove_crashed_deletes(layout, name)
        ids = owner() if owner is not None else None
        staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(name), dir=layout.chats))
        try:
            with pinned.opened_dir(staging) as staging_fd:
                try:
                    with tarfile.open(source, mode="r:gz", tarinfo=_SparseSafeInfo) as tar:
                        refused = _extract(tar, staging_fd, name, layout, ids)
                        _read_to_the_end(tar)
                except (tarfile.TarError, EOFError, OSError, ArchiveError) as exc:
                    raise ArchiveError(f"cannot unpack {source}: {exc}") from exc
            if not os.path.isdir(staging / name):
                raise ArchiveError(f"{source} holds no directory {name}/; left it untouched")
            os.rename(staging / name, home)
            fsync_dir(layout.chats)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        size = source.stat().st_size
        os.unlink(source)
        fsync_dir(layout.archive)
    for member in refused:
        log.warning("restoring %s: refused member %r (it would leave the home)", name, member)
    log.info("restored home %s from %s", home, source)
    return ArchiveResult(name, source, size, 0, tuple(refused))


def _remove_crashed_archives(layout: Layout, name: str) -> None:
    """Delete the half-written tarballs of ``name`` that archivings cut off by a crash left
    in ``archive/`` (as big as the home, never used). The caller holds the home's lock;
    another home's (whose name may start with this one's) has a longer name."""
    prefix = f".{name}."
    for entry in os.listdir(layout.archive):
        rest = entry[len(prefix) : -len(TMP_SUFFIX)]
        if not (entry.startswith(prefix) and entry.endswith(TMP_SUFFIX)):
            continue
        if len(rest) != STAGING_SUFFIX_CHARS:
            continue
        log.warning("archiving %s: removing %s, left by an archiving cut off", name, entry)
        with _quiet():
            os.unlink(layout.archive / entry)


def _staging_prefix(name: str) -> str:
    return f".restore-{name}."


def _trash_prefix(name: str) -> str:
    return f".archived-{name}."


def _remove_crashed_restores(layout: Layout, name: str) -> None:
    """Delete what restores of ``name`` cut off by a crash left: their staging directories,
    partial copies of the home nothing else would ever remove. The caller holds the home's
    lock, so none of them is in use; another home's (whose name may start with this one's)
    has a longer name than :data:`STAGING_SUFFIX_CHARS` after the prefix."""
    _remove_leftovers(layout, _staging_prefix(name), f"restoring {name}", "a restore cut off")


def _remove_crashed_deletes(layout: Layout, name: str) -> None:
    """Delete the packed copies of ``name`` that archivings cut off while deleting them
    (Ctrl-C, a crash) left hidden in ``chats/`` (see :func:`_remove_packed`): their tarball
    was whole before the home was moved there. The caller holds the home's lock."""
    _remove_leftovers(layout, _trash_prefix(name), name, "an archiving cut off")


def _remove_leftovers(layout: Layout, prefix: str, what: str, cause: str) -> None:
    for entry in os.listdir(layout.chats):
        rest = entry[len(prefix) :]
        if not entry.startswith(prefix) or len(rest) != STAGING_SUFFIX_CHARS:
            continue
        log.warning("%s: removing %s, left by %s", what, entry, cause)
        shutil.rmtree(layout.chats / entry, ignore_errors=True)  # fd-based: follows no link


def _read_to_the_end(tar: tarfile.TarFile) -> None:
    """Read the compressed stream past the tar's end, so gzip checks its CRC and length:
    tarfile stops at the end-of-archive blocks, and a flipped bit inside a file's bytes
    would otherwise come back as the home's (and its only copy, the tarball, be deleted)."""
    stream = cast(IO[bytes], tar.fileobj)
    while stream.read(COPY_CHUNK):
        pass


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
