"""What a freed uid may still have on the host, cleared before the uid serves again.

An archived conversation gives its account back (:mod:`provisioning.reclaim`), and its
uid may later be another conversation's. The kernel knows owners by number only, so
anything the old account left outside its home would be the new one's: a file in
``/tmp`` with its notes, a setuid copy of a shell (run by any other account, it is a
process of that uid), a shared-memory segment. Its home went into the tarball; these did
not. Before a freed uid (its account deleted) is handed to another conversation
(:func:`provisioning.freed_uids.fit_for`; not at the archive, see there):

* every file, link, FIFO or socket the uid owns in the world-writable places
  (:data:`PLACES`: ``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/dev/mqueue``) is deleted, a
  directory it owns too once it is empty; one that still holds another account's files is
  given to root (its mode kept), and another account's entry in the old private group is
  given to group root. Nothing else is touched. The walk is :class:`~provisioning.walk.TreeWalk`:
  pinned by descriptors, it follows no link and stays on each place's filesystem. It does
  not enter a directory of root's that the uid cannot search (no ``x`` for others, nor for
  the group when it is the uid's, and no ACL): nothing below it was reachable by the uid,
  and only root can open it up later. A full host's ``/tmp`` is mostly such trees (private
  temporary directories of root's services, test runs, browsers), so the walk stays short;
* System V IPC objects (shared memory, semaphores, message queues) of the uid or its group
  are removed (``ipcrm``);
* and no process may have the uid or the group (real, effective, saved, filesystem or
  supplementary): the caller kills the uid's with the bridge's killer, then
  :func:`processes_of` must find none.

Any failure (a tree deeper than the walk goes, an object that cannot be removed, a process
left) means the uid is not handed out this time; the allocation takes another. This module
knows nothing about conversations; which uid and when is :mod:`provisioning.accounts`'.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import pinned
from .errors import UnsafePathError
from .walk import CHANGED, SKIPPED, UNCHANGED, TreeWalk, WalkReport

log = logging.getLogger(__name__)

PLACES = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"), Path("/dev/mqueue"))
ROOT_ID = 0  # who a left directory, or another's entry in the old group, is given to
PROC = Path("/proc")
SYSVIPC = PROC / "sysvipc"
# /proc/sysvipc/<kind>: the column of the object's id, and ipcrm's flag for the kind
IPC_KINDS = (("shm", "shmid", "-m"), ("sem", "semid", "-s"), ("msg", "msqid", "-q"))
IPC_OWNER_COLUMNS = ("uid", "cuid")
IPC_GROUP_COLUMNS = ("gid", "cgid")
IPCRM_TIMEOUT_S = 10.0
STATUS_ID_ROWS = ("Uid:", "Gid:", "Groups:")  # /proc/<pid>/status: real, effective, saved, fs
STATUS_ROWS = ("State:", *STATUS_ID_ROWS)
ZOMBIE = "Z"  # State: a process that ended, waiting for its parent: it can do nothing
ACL_XATTR = "system.posix_acl_access"  # a POSIX ACL on a directory may let the uid search it
NO_XATTR = (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP)  # no ACL, or none on that fs


@dataclass
class LeftoverReport:
    """What clearing one uid's leftovers did; ``ok`` only when nothing of it is left."""

    uid: int
    walk: WalkReport = field(default_factory=WalkReport)
    removed: int = 0  # files, links and directories deleted
    given_away: int = 0  # directories given to root, others' entries to group root
    ipc_removed: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.walk.failed == 0 and not self.errors

    def problems(self) -> str:
        return "; ".join([*self.walk.errors, *self.errors][:5])


class _ClearWalk(TreeWalk):
    """Deletes what ``uid`` owns under one place; gives away what it cannot delete."""

    def __init__(self, report: LeftoverReport, uid: int, gid: int, dev: int) -> None:
        super().__init__(report.walk)
        self.leftovers = report
        self.uid, self.gid, self.dev = uid, gid, dev

    def enters(self, dir_fd: int, name: str, st: os.stat_result) -> bool:
        if st.st_dev != self.dev:
            return False  # another filesystem mounted below the place: not ours
        return not self._sealed(dir_fd, name, st)

    def _sealed(self, dir_fd: int, name: str, st: os.stat_result) -> bool:
        """Whether ``name`` is root's and the uid could not search it (nothing below it
        can be the uid's next holder's; see the module docstring)."""
        if st.st_uid != ROOT_ID:
            return False  # its owner may open it up again: what the uid made in it counts
        if st.st_mode & stat.S_IXOTH or (st.st_gid == self.gid and st.st_mode & stat.S_IXGRP):
            return False
        try:
            os.getxattr(f"/proc/self/fd/{dir_fd}/{name}", ACL_XATTR, follow_symlinks=False)
        except OSError as exc:
            return exc.errno in NO_XATTR  # any other failure: entered, to be safe
        return False  # an ACL: it may name the uid

    def directory(self, fd: int, st: os.stat_result, where: str, *, top: bool) -> None:
        if not top and st.st_uid != self.uid and st.st_gid == self.gid:
            self._regroup(lambda: os.fchown(fd, -1, ROOT_ID), where)

    def regular(self, dir_fd: int, name: str, st: os.stat_result, where: str) -> int:
        return self._entry(dir_fd, name, st, f"{where}/{name}")

    def not_regular(self, dir_fd: int, entry: os.DirEntry[str], where: str) -> None:
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            return
        except OSError as exc:
            self.report.fail(f"{where}/{entry.name}", f"cannot stat: {exc.strerror}")
            return
        if self._entry(dir_fd, entry.name, st, f"{where}/{entry.name}") == CHANGED:
            self.report.skipped -= 1  # counted as skipped by the walk; it was dealt with
            self.report.changed += 1

    def _entry(self, dir_fd: int, name: str, st: os.stat_result, where: str) -> int:
        if st.st_uid == self.uid:
            try:
                os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                return UNCHANGED
            except OSError as exc:
                self.report.fail(where, f"cannot delete: {exc.strerror}")
                return UNCHANGED
            self.leftovers.removed += 1
            return CHANGED
        if st.st_gid == self.gid:
            changed = self._regroup(
                lambda: os.chown(name, -1, ROOT_ID, dir_fd=dir_fd, follow_symlinks=False), where
            )
            return CHANGED if changed else UNCHANGED
        return SKIPPED

    def left(self, dir_fd: int, name: str, dev: int, ino: int, where: str) -> None:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        except OSError as exc:
            self.report.fail(where, f"cannot stat: {exc.strerror}")
            return
        if (st.st_dev, st.st_ino) != (dev, ino) or st.st_uid != self.uid:
            return  # not the directory walked (renamed meanwhile), or not the uid's
        try:
            os.rmdir(name, dir_fd=dir_fd)
            self.leftovers.removed += 1
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                self.report.fail(where, f"cannot remove: {exc.strerror}")
                return
        # another account's files are in it: the directory is given to root, so the uid's
        # next holder does not own a directory of someone else's files
        try:
            fd = pinned.open_dir(name, dir_fd)
        except (OSError, UnsafePathError) as exc:
            self.report.fail(where, f"cannot open: {exc}")
            return
        try:
            opened = os.fstat(fd)
            if (opened.st_dev, opened.st_ino) == (dev, ino):
                os.fchown(fd, ROOT_ID, ROOT_ID)
                self.leftovers.given_away += 1
        except OSError as exc:
            self.report.fail(where, f"cannot give to root: {exc.strerror}")
        finally:
            os.close(fd)

    def _regroup(self, change: Callable[[], None], where: str) -> bool:
        try:
            change()
        except FileNotFoundError:
            return False
        except OSError as exc:
            self.report.fail(where, f"cannot give to group root: {exc.strerror}")
            return False
        self.leftovers.given_away += 1
        return True


def clear_files(uid: int, gid: int, places: tuple[Path, ...] = PLACES) -> LeftoverReport:
    """Delete what ``uid`` left in ``places`` (see the module docstring). Blocking."""
    report = LeftoverReport(uid)
    for place in places:
        try:
            fd = pinned.open_dir(place)
        except FileNotFoundError:
            continue  # no /dev/mqueue mounted here, say
        except UnsafePathError:
            log.info("%s is a link: not walked (its target is walked when it is listed)", place)
            continue
        except OSError as exc:
            report.errors.append(f"{place}: cannot open: {exc.strerror}")
            continue
        try:
            _ClearWalk(report, uid, gid, os.fstat(fd).st_dev).run(fd, str(place))
        finally:
            os.close(fd)
    _clear_ipc(uid, gid, report)
    return report


def _clear_ipc(uid: int, gid: int, report: LeftoverReport) -> None:
    for kind, id_column, flag in IPC_KINDS:
        try:
            lines = (SYSVIPC / kind).read_text(encoding="ascii").splitlines()
        except OSError:
            continue  # no System V IPC here
        if not lines:
            continue
        header = lines[0].split()
        for line in lines[1:]:
            row = dict(zip(header, line.split(), strict=False))
            try:
                owners = {int(row[c]) for c in IPC_OWNER_COLUMNS if c in row}
                groups = {int(row[c]) for c in IPC_GROUP_COLUMNS if c in row}
                ident = str(int(row[id_column]))
            except (KeyError, ValueError):
                continue
            if uid not in owners and gid not in groups:
                continue
            try:
                done = subprocess.run(
                    ["ipcrm", flag, ident],
                    capture_output=True,
                    text=True,
                    timeout=IPCRM_TIMEOUT_S,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                report.errors.append(f"System V {kind} {ident} of uid {uid}: ipcrm: {exc}")
                continue
            if done.returncode != 0 and "invalid id" not in done.stderr.lower():
                report.errors.append(
                    f"System V {kind} {ident} of uid {uid}: ipcrm: {done.stderr.strip()}"
                )
                continue
            report.ipc_removed += 1


def processes_of(uid: int, gid: int) -> list[int]:
    """Pids of the processes with ``uid`` or ``gid`` among any of their ids (a scan of
    ``/proc``: it can miss a process forked meanwhile, so the uid's are killed first).
    Zombies are not counted: ended, they can act no more, and only their parent's wait
    removes them."""
    found = []
    for name in os.listdir(PROC):
        if not name.isdigit():
            continue
        try:
            with open(PROC / name / "status", encoding="ascii", errors="replace") as fh:
                rows = {
                    words[0]: words[1:]
                    for words in (line.split() for line in fh if line.startswith(STATUS_ROWS))
                }
        except OSError:
            continue  # ended meanwhile
        if rows.get("State:", [""])[0] == ZOMBIE:
            continue
        if str(uid) in rows.get("Uid:", ()) or any(
            str(gid) in rows.get(row, ()) for row in ("Gid:", "Groups:")
        ):
            found.append(int(name))
    return found
