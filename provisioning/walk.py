"""The deep home walk: the Jazz CLI's permission rule applied to everything in a home.

In a setgid home (isolated) only "other" bits are cleared, so operators keep group read; in
a private home group and other bits are cleared. The owner's bits, execute included, stay;
setuid/setgid are stripped from regular files. Directories only lose bits, they gain none.

Only entries owned by the conversation's account are changed. Symbolic links, other
accounts' files (hard links to them included), FIFOs, sockets and devices are left alone,
counted as skipped and never opened. Another account's directory is left as it is too, but
walked into: the owner's own files in it are still its own.

The walk is pinned by directory descriptors: every directory is opened relative to its
parent's descriptor with ``O_NOFOLLOW | O_DIRECTORY``, and its ``fstat`` must be the inode
the listing saw, so a conversation swapping a directory for a link (or another directory)
mid-walk gets its swap skipped, never followed. Nothing is ever re-resolved by path.

Descriptors are bounded: one per level is kept open for the innermost ``FD_BUDGET`` levels;
above that, a level's descriptor is closed and later recovered by opening ``..`` from its
child and checking it is the same inode (if it is not, the directory was moved meanwhile and
the rest of it is not walked: a failure). Directories deeper than ``MAX_DEPTH`` are refused.

The traversal is :class:`TreeWalk`; what happens to each entry is a subclass's hooks. The
repair rule here is one; handing a single-account home over to its new account
(:mod:`provisioning.handover`) is the other, so both share one pinned walker.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from datetime import UTC, datetime
from pathlib import Path

from . import pinned
from .modes import GROUP_BITS, OTHER_BITS, REPAIR_MARKER, SPECIAL_EXEC_BITS
from .walk_report import MAX_ERRORS, WalkReport, shown

__all__ = [
    "FD_BUDGET",
    "MAX_DEPTH",
    "MAX_ERRORS",
    "TreeWalk",
    "WalkReport",
    "repair_home_tree",
    "shown",
]

MAX_DEPTH = 4096  # levels below the home; deeper directories are refused (failed)
FD_BUDGET = 64  # directory descriptors the walk keeps open at most (besides the home's)
MARKER_VERSION = 1

_DIR_OPEN = pinned.DIR_FLAGS | os.O_NONBLOCK
_MARKER_OPEN = (
    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
)
_S_IFMT = 0o170000
_S_IFREG = stat.S_IFREG
_NO_NAMES: frozenset[str] = frozenset()
_SWAPPED = (errno.ELOOP, errno.ENOTDIR)  # opening a listed directory found a link or a file


# What a regular-file hook did with its entry (TreeWalk.regular).
UNCHANGED = 0  # nothing to do, or a failure it recorded itself
CHANGED = 1
SKIPPED = 2  # left alone: another account's, a hard link, swapped since it was listed


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


class _Frame:
    """One directory on the walk's path: its descriptor (or -1 while parked) and identity."""

    __slots__ = ("dev", "fd", "ino", "name", "next", "subdirs", "where")

    def __init__(
        self,
        fd: int,
        dev: int,
        ino: int,
        where: str,
        subdirs: list[tuple[str, int, int]],
        name: str = "",
    ) -> None:
        self.fd = fd
        self.dev = dev
        self.ino = ino
        self.where = where
        self.subdirs = subdirs
        self.name = name
        self.next = 0


def repair_home_tree(
    home: Path, *, setgid_home: bool, owner_uid: int, force: bool = False
) -> WalkReport:
    """Apply the home-repair rule to ``home`` and everything in it (blocking).

    Raises :class:`~provisioning.errors.UnsafePathError` when ``home`` is a link or not a
    directory and ``OSError`` when it cannot be opened; anything that goes wrong inside is
    counted in ``failed`` with a message. With ``failed == 0`` the marker
    (``modes.REPAIR_MARKER``) is written; while it exists (a regular file) later calls
    return at once with ``skipped_by_marker`` unless ``force``. A walk with failures removes
    an earlier marker, so the next one (the home's first ``Homes.ensure`` in a process, or
    ``repair --deep``) walks again.
    """
    report = WalkReport()
    home_fd = pinned.open_dir(home)
    try:
        if not force and _marker_present(home_fd):
            report.skipped_by_marker = True
            return report
        clear = OTHER_BITS if setgid_home else OTHER_BITS | GROUP_BITS
        _RepairWalk(report, owner_uid, clear).run(home_fd, str(home))
        if report.failed == 0:
            _write_marker(home_fd, str(home), owner_uid, setgid_home, report)
        else:
            drop_marker(home_fd)
    finally:
        os.close(home_fd)
    return report


class TreeWalk:
    """The pinned traversal of a home; subclasses say what happens to each entry.

    Hooks (each must record its own failures with ``report.fail`` and raise nothing):

    * :meth:`directory` for every directory reached, the home included (``top``), with its
      descriptor and the ``fstat`` of it (checked to be the inode the listing saw);
    * :meth:`regular` for every regular file, with its directory's descriptor, its name and
      its ``lstat``; it returns ``UNCHANGED``, ``CHANGED`` or ``SKIPPED``;
    * :meth:`not_regular` for everything else (links, FIFOs, sockets, devices), counted as
      skipped by the walk; never to be opened except ``O_PATH``;
    * :meth:`enters` for every subdirectory listed, before it is opened, with its parent's
      descriptor, its name and its ``lstat``: False passes it over (another filesystem,
      say);
    * :meth:`left` for every directory below the top once everything in it was walked,
      with its parent's descriptor, its name and identity (to remove it, say).

    Names in ``top_skip`` are passed over in the home itself (a walk's own markers).
    """

    top_skip: frozenset[str] = _NO_NAMES

    def __init__(self, report: WalkReport) -> None:
        self.report = report

    def directory(self, fd: int, st: os.stat_result, where: str, *, top: bool) -> None:
        """One directory, pinned by ``fd`` (already counted as checked)."""

    def regular(self, dir_fd: int, name: str, st: os.stat_result, where: str) -> int:
        """One regular file ``name`` in ``dir_fd`` (``where`` is the directory's path)."""
        return UNCHANGED

    def not_regular(self, dir_fd: int, entry: os.DirEntry[str], where: str) -> None:
        """A link, FIFO, socket or device (already counted as checked and skipped)."""

    def enters(self, dir_fd: int, name: str, st: os.stat_result) -> bool:
        """Whether to walk into subdirectory ``name`` of ``dir_fd`` (``st``: its ``lstat``)."""
        return True

    def left(self, dir_fd: int, name: str, dev: int, ino: int, where: str) -> None:
        """Directory ``name`` of ``dir_fd`` (``where``), whose walk is over, was the inode
        (``dev``, ``ino``) the walk opened; it may have been replaced by name since."""

    def run(self, home_fd: int, where: str) -> None:
        report = self.report
        try:
            st = os.fstat(home_fd)
        except OSError as exc:
            report.checked += 1
            report.fail(where, f"cannot stat: {_why(exc)}")
            return
        report.checked += 1
        subdirs = self._enter(home_fd, st, where, top=True)
        if subdirs is None:
            return
        # stack[0] is the home: its descriptor belongs to the caller and is never parked
        stack = [_Frame(home_fd, st.st_dev, st.st_ino, where, subdirs)]
        parked = 1  # stack[1:parked] have their descriptor closed (fd == -1)
        try:
            while stack:
                top = stack[-1]
                if top.next < len(top.subdirs):
                    name, dev, ino = top.subdirs[top.next]
                    top.next += 1
                    child = self._open_child(top, name, dev, ino, len(stack))
                    if child is None:
                        continue
                    fd, cst, child_where = child
                    try:
                        sub = self._enter(fd, cst, child_where, top=False)
                    except BaseException:
                        os.close(fd)
                        raise
                    if not sub:  # nothing below it: no need to keep it open
                        os.close(fd)
                        self.left(top.fd, name, dev, ino, child_where)
                        continue
                    stack.append(_Frame(fd, dev, ino, child_where, sub, name))
                    if len(stack) - parked > FD_BUDGET:
                        os.close(stack[parked].fd)
                        stack[parked].fd = -1
                        parked += 1
                    continue
                # top is done: back to its parent
                stack.pop()
                if not stack:
                    break
                parent = stack[-1]
                if parent.fd == -1:
                    if self._unpark(top, parent):
                        parked -= 1
                    else:
                        for lost in stack[1:]:  # every parked level is out of reach now
                            report.fail(lost.where, "moved during the walk; the rest not walked")
                        del stack[1:]
                        parked = 1
                os.close(top.fd)
                if stack[-1] is parent:  # its parent is open again: the directory is done
                    self.left(parent.fd, top.name, top.dev, top.ino, top.where)
        finally:
            for frame in stack[1:]:
                if frame.fd != -1:
                    os.close(frame.fd)

    def _open_child(
        self, parent: _Frame, name: str, dev: int, ino: int, depth: int
    ) -> tuple[int, os.stat_result, str] | None:
        """Open a listed subdirectory pinned to its parent; None when skipped or failed."""
        report = self.report
        where = f"{parent.where}/{name}"
        if depth > MAX_DEPTH:
            report.fail(where, f"deeper than {MAX_DEPTH} levels below the home; not walked")
            return None
        try:
            fd = os.open(name, _DIR_OPEN, dir_fd=parent.fd)
        except FileNotFoundError:
            return None  # removed since it was listed (a /tmp cleaned meanwhile): nothing to do
        except OSError as exc:
            if exc.errno in _SWAPPED:
                report.skipped += 1  # swapped for a link or a file since it was listed
                report.note_skip(where, "became a link or a file while walked; not followed")
            else:
                report.fail(where, f"cannot open: {_why(exc)}")
            return None
        try:
            st = os.fstat(fd)
        except OSError as exc:
            os.close(fd)
            report.fail(where, f"cannot stat: {_why(exc)}")
            return None
        if st.st_ino != ino or st.st_dev != dev:
            os.close(fd)
            report.skipped += 1  # another directory took its name since it was listed
            report.note_skip(where, "replaced by another directory while walked; not entered")
            return None
        return fd, st, where

    def _unpark(self, child: _Frame, parent: _Frame) -> bool:
        """Recover a parked parent's descriptor from ``..`` of its child, same inode only."""
        try:
            fd = os.open("..", _DIR_OPEN, dir_fd=child.fd)
        except OSError:
            return False
        try:
            st = os.fstat(fd)
        except OSError:
            os.close(fd)
            return False
        if st.st_ino != parent.ino or st.st_dev != parent.dev:
            os.close(fd)
            return False
        parent.fd = fd
        return True

    def _enter(
        self, fd: int, st: os.stat_result, where: str, *, top: bool
    ) -> list[tuple[str, int, int]] | None:
        """Repair one directory (already counted) and its non-directories.

        Returns its subdirectories to walk, as (name, st_dev, st_ino) from the listing, or
        None when it could not be listed.
        """
        report = self.report
        self.directory(fd, st, where, top=top)
        try:
            it = os.scandir(fd)
        except OSError as exc:
            report.fail(where, f"cannot list: {_why(exc)}")
            return None
        regular, not_regular = self.regular, self.not_regular
        skip_names = self.top_skip if top else _NO_NAMES
        subdirs: list[tuple[str, int, int]] = []
        checked = changed = skipped = 0
        try:
            with it:
                for entry in it:
                    if entry.is_dir(follow_symlinks=False):
                        checked += 1
                        try:
                            est = entry.stat(follow_symlinks=False)
                        except OSError as exc:
                            report.fail(f"{where}/{entry.name}", f"cannot stat: {_why(exc)}")
                            continue
                        if self.enters(fd, entry.name, est):
                            subdirs.append((entry.name, est.st_dev, est.st_ino))
                        else:
                            skipped += 1
                            report.note_skip(f"{where}/{entry.name}", "not walked into")
                        continue
                    if not entry.is_file(follow_symlinks=False):
                        checked += 1
                        skipped += 1  # links, FIFOs, sockets, devices: never opened
                        report.note_skip(f"{where}/{entry.name}", _kind(entry))
                        not_regular(fd, entry, where)
                        continue
                    name = entry.name
                    if name in skip_names:
                        continue  # the walk's own marker, rewritten at the end
                    checked += 1
                    try:
                        est = entry.stat(follow_symlinks=False)
                    except OSError as exc:
                        report.fail(f"{where}/{name}", f"cannot stat: {_why(exc)}")
                        continue
                    done = regular(fd, name, est, where)
                    if done == CHANGED:
                        changed += 1
                    elif done == SKIPPED:
                        skipped += 1  # the hook noted why
        except OSError as exc:  # reading the directory itself failed part way
            report.fail(where, f"cannot list: {_why(exc)}")
        report.checked += checked
        report.changed += changed
        report.skipped += skipped
        return subdirs


class _RepairWalk(TreeWalk):
    """The home-repair rule: clear ``clear`` (and setuid/setgid of files) on the owner's own."""

    top_skip = frozenset({REPAIR_MARKER})

    def __init__(self, report: WalkReport, owner_uid: int, clear: int) -> None:
        super().__init__(report)
        self.owner_uid = owner_uid
        self.dir_keep = 0o7777 & ~clear
        self.file_keep = 0o7777 & ~clear & ~SPECIAL_EXEC_BITS

    def directory(self, fd: int, st: os.stat_result, where: str, *, top: bool) -> None:
        report = self.report
        if st.st_uid != self.owner_uid:
            report.skipped += 1  # another account's directory: left as it is, walked into
            report.note_skip(where, _not_own(st.st_uid, "directory; its own files walked"))
            return
        mode = st.st_mode & 0o7777
        want = mode & self.dir_keep
        if want != mode:
            try:
                os.fchmod(fd, want)
                report.changed += 1
            except OSError as exc:
                report.fail(where, f"cannot change mode: {_why(exc)}")

    def regular(self, dir_fd: int, name: str, st: os.stat_result, where: str) -> int:
        if st.st_uid != self.owner_uid or st.st_mode & _S_IFMT != _S_IFREG:
            # another account's (or its hard link), or swapped
            self.report.note_skip(f"{where}/{name}", _not_own(st.st_uid, "file"))
            return SKIPPED
        mode = st.st_mode & 0o7777
        want = mode & self.file_keep
        if want == mode:
            return UNCHANGED
        try:
            if pinned.chmod_entry(dir_fd, name, want, st):
                return CHANGED
            self.report.note_skip(f"{where}/{name}", "replaced while repaired; left alone")
            return SKIPPED
        except OSError as exc:
            self.report.fail(f"{where}/{name}", f"cannot change mode: {_why(exc)}")
            return UNCHANGED


def _kind(entry: os.DirEntry[str]) -> str:
    """Why a non-regular entry is left alone, for the report."""
    if entry.is_symlink():
        return "a symbolic link (never followed)"
    try:
        mode = entry.stat(follow_symlinks=False).st_mode
    except OSError:
        return "not a regular file (never opened)"
    if stat.S_ISFIFO(mode):
        return "a FIFO (never opened)"
    if stat.S_ISSOCK(mode):
        return "a socket (never opened)"
    return (
        "a device (never opened)"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else ("not a regular file (never opened)")
    )


def _not_own(uid: int, what: str) -> str:
    return f"another account's {what} (uid {uid}, not the conversation's): left as it is"


def _marker_present(home_fd: int) -> bool:
    try:
        st = os.stat(REPAIR_MARKER, dir_fd=home_fd, follow_symlinks=False)
    except OSError:  # absent, or unreadable (then the walk says why)
        return False
    return stat.S_ISREG(st.st_mode)


def _remove_marker(home_fd: int) -> None:
    """Remove whatever has the marker's name (file, link, FIFO, empty directory)."""
    try:
        os.unlink(REPAIR_MARKER, dir_fd=home_fd)
    except FileNotFoundError:
        pass
    except (IsADirectoryError, PermissionError) as exc:
        # unlink(2) of a directory: EISDIR on Linux, EPERM elsewhere; only an empty one goes
        try:
            os.rmdir(REPAIR_MARKER, dir_fd=home_fd)
        except OSError:
            raise exc from None


def drop_marker(home_fd: int) -> None:
    """Remove the repair marker (a regular file only), so the next ensure walks the home.

    After a walk with failures a marker from an earlier walk must not stop the next one; after
    a home changed hands (:mod:`provisioning.handover`) its next walk uses the new rule.
    """
    try:
        st = os.stat(REPAIR_MARKER, dir_fd=home_fd, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode):
            os.unlink(REPAIR_MARKER, dir_fd=home_fd)
    except OSError:
        pass


def _write_marker(
    home_fd: int, where: str, owner_uid: int, setgid_home: bool, report: WalkReport
) -> None:
    """Create the marker anew through the home's descriptor (a failure counts in report).

    Whatever has its name is removed first and the file is created with ``O_EXCL``, so the
    write can never land in a link's target nor in a hard link to another file.
    """
    path = f"{where}/{REPAIR_MARKER}"
    mode = 0o640 if setgid_home else 0o600
    data = (
        json.dumps(
            {
                "version": MARKER_VERSION,
                "repairedAt": datetime.now(UTC).isoformat(timespec="seconds"),
            }
        )
        + "\n"
    ).encode()
    fd = -1
    try:
        for _attempt in range(3):
            _remove_marker(home_fd)
            try:
                fd = os.open(REPAIR_MARKER, _MARKER_OPEN, mode, dir_fd=home_fd)
                break
            except FileExistsError:
                continue  # recreated between the unlink and the open: once more
        else:
            report.fail(path, "keeps being recreated; marker not written")
            return
        st = os.fstat(fd)
        if st.st_uid != owner_uid:
            os.fchown(fd, owner_uid, -1)
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        report.fail(path, f"cannot write the marker: {_why(exc)}")
    finally:
        if fd != -1:
            os.close(fd)
