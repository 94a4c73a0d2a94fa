"""Handing a home made single-account over to the conversation's new account, once.

Why: a root served as root with ``isolation = "off"`` (the README's way to try the gateway)
runs every conversation as the gateway's own account, so a home and everything its runs
wrote are the gateway's (root's), ``0700``/``0600``. Served isolated afterwards, each
conversation gets an account and its home is given to it, but the home repair leaves other
accounts' files alone by design: the conversation's own agent could not read its history.

When: a home is *adopted* when, in an isolated root, its directory is still exactly what
the single-account layout makes: the gateway's uid, ``0700`` (``modes.PRIVATE_DIR_MODE``; the
start-up repair puts it back at every start). A home of the gateway's at another mode was
changed by someone else (an operator's ``chown``, a restore): it is given to its account as
before, contents untouched, with a warning. Before the home directory itself changes hands, a marker
(``modes.HANDOVER_MARKER``, the gateway's, ``0600``, flushed) is written in it, and it is
removed only after a walk without failures. So the home's owner or the marker says a
handover is due, and a crash anywhere (the start-up repair that gives the home away only
marks it) is finished by the next ``Homes.ensure`` or ``jazz-bridge repair --deep``. A
marker that is not a regular file of the gateway's with one link is not ours: it is
ignored (a conversation cannot forge one).

What: the pinned walk of :mod:`provisioning.walk` (never follows a link, safe against a
directory swapped for a link mid-walk) gives every directory and every regular file owned
by the gateway's uid to ``account:O``: directories keep their owner and group bits, lose
"other" and gain setgid (as any directory made in an isolated home: new files land in O);
files keep their owner and group bits and lose "other" and setuid/setgid
(``modes.HANDOVER_*``). Under Jazz's own record directories (``history``, ``memory``,
``agents``: ``modes.HANDOVER_GROUP_READABLE``) the group also gets the owner's read and
search bits, as the isolated umask would have given them, so operators (group O) can read
the conversation's past for support; elsewhere nothing is widened, since a ``0600`` there
may be a program's own choice (an SSH key). The home directory itself is the caller's (its
exact table mode).
Left as they are: anything owned by another uid; symbolic links (their owner grants
nothing on Linux, so they are not touched at all); a regular file with more than one link,
logged by name (a run as root could have hard-linked ``/etc/shadow`` into the home: handing
it over would give the account that file); FIFOs, sockets and devices, logged by name.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
from dataclasses import dataclass
from datetime import UTC, datetime

from . import pinned
from .errors import ProvisioningError
from .modes import (
    HANDOVER_DIR_ADD,
    HANDOVER_DIR_DROP,
    HANDOVER_FILE_DROP,
    HANDOVER_GROUP_READABLE,
    HANDOVER_MARKER,
    HANDOVER_MARKER_MODE,
    PRIVATE_DIR_MODE,
    REPAIR_MARKER,
    TEMPLATE_MARKER,
    group_reads_like_owner,
)
from .walk import CHANGED, SKIPPED, UNCHANGED, TreeWalk, WalkReport, drop_marker, shown

log = logging.getLogger(__name__)

MAX_NAMED = 20  # entries left behind named one by one in the log, per home
MARKER_VERSION = 1

_MARKER_OPEN = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@dataclass
class HandoverReport:
    """One handover: the walk's counts plus what was left behind and why."""

    walk: WalkReport
    handed_over: int = 0
    hard_links: int = 0  # regular files with more than one link: left the gateway's
    special: int = 0  # the gateway's FIFOs, sockets and devices: left the gateway's

    @property
    def other_skipped(self) -> int:
        """Links, other accounts' entries, entries swapped since they were listed."""
        return max(0, self.walk.skipped - self.hard_links - self.special)


def mark_if_adopted(home_fd: int, where: str, *, uid: int, gateway_uid: int) -> bool:
    """Whether ``home_fd`` has a handover due to ``uid``; writes the marker when adopted.

    Call it before giving the home directory itself to ``uid``. Raises
    :class:`ProvisioningError` when the marker cannot be written: then the home must stay
    the gateway's, or the handover would be forgotten.
    """
    if uid == gateway_uid:
        return False
    if _marker_present(home_fd, gateway_uid):
        return True
    st = os.fstat(home_fd)
    if st.st_uid != gateway_uid:
        return False
    if stat.S_IMODE(st.st_mode) != PRIVATE_DIR_MODE:
        log.warning(
            "%s is the gateway's (uid %d) but %04o, not a single-account home (%04o): given to "
            "uid %d without handing over its contents",
            where,
            gateway_uid,
            stat.S_IMODE(st.st_mode),
            PRIVATE_DIR_MODE,
            uid,
        )
        return False
    try:
        _write_marker(home_fd, gateway_uid, uid)
    except OSError as exc:
        raise ProvisioningError(
            f"cannot mark {where} for its handover to uid {uid}: {exc.strerror or exc}; "
            "the home stays the gateway's until it can"
        ) from exc
    return True


def hand_over(
    home_fd: int, where: str, *, uid: int, gid: int, gateway_uid: int
) -> HandoverReport | None:
    """Give the gateway's entries in an adopted home to ``uid:gid`` (blocking).

    Returns None when no handover is due (most calls: one ``fstat`` and one ``lstat``).
    Logs once at info what was handed over and what was left and why; with failures, a
    warning, and the marker stays so that the next ensure or ``repair --deep`` tries again.
    """
    if not mark_if_adopted(home_fd, where, uid=uid, gateway_uid=gateway_uid):
        return None
    walk = _HandoverWalk(WalkReport(), where, gateway_uid, uid, gid)
    walk.run(home_fd, where)
    done = walk.result
    if done.walk.failed:
        log.warning(
            "handover of %s to uid %d unfinished: %d entries handed over, %d failure(s): %s; "
            "the next jazz-bridge homes ensure or repair --deep tries again",
            where,
            uid,
            done.handed_over,
            done.walk.failed,
            "; ".join(done.walk.errors[:5]),
        )
        return done
    drop_marker(home_fd)  # the home repair walks again, now with the isolated rule
    try:
        os.unlink(HANDOVER_MARKER, dir_fd=home_fd)
    except FileNotFoundError:
        pass
    log.info(
        "handed %s over to uid %d: %d entries handed over; left the gateway's: %d hard-linked "
        "file(s), %d FIFO/socket/device(s); %d link(s), other accounts' or moved entries "
        "left alone",
        where,
        uid,
        done.handed_over,
        done.hard_links,
        done.special,
        done.other_skipped,
    )
    return done


class _HandoverWalk(TreeWalk):
    top_skip = frozenset({HANDOVER_MARKER, REPAIR_MARKER, TEMPLATE_MARKER})

    def __init__(self, report: WalkReport, home: str, gateway_uid: int, uid: int, gid: int) -> None:
        super().__init__(report)
        self.home = home
        self.gateway_uid = gateway_uid
        self.uid = uid
        self.gid = gid
        self.result = HandoverReport(report)
        self._named = 0

    def directory(self, fd: int, st: os.stat_result, where: str, *, top: bool) -> None:
        if top:
            return  # the home itself: the caller gives it its exact mode
        if st.st_uid != self.gateway_uid:
            self.report.skipped += 1  # another account's: left as it is, walked into
            return
        mode = (stat.S_IMODE(st.st_mode) & ~HANDOVER_DIR_DROP) | HANDOVER_DIR_ADD
        if self._records(where):
            mode = group_reads_like_owner(mode)
        try:
            os.fchown(fd, self.uid, self.gid)  # before the mode (chown may clear setgid)
            os.fchmod(fd, mode)
        except OSError as exc:
            self.report.fail(where, f"cannot hand over: {exc.strerror or exc}")
            return
        self.report.changed += 1
        self.result.handed_over += 1

    def regular(self, dir_fd: int, name: str, st: os.stat_result, where: str) -> int:
        if st.st_uid != self.gateway_uid:
            return SKIPPED
        path = f"{where}/{name}"
        if st.st_nlink > 1:
            self.result.hard_links += 1
            self._name(
                "%s has %d links (a hard link, maybe to a file outside the home): left the "
                "gateway's, not handed to uid %d",
                shown(path),
                st.st_nlink,
                self.uid,
            )
            return SKIPPED
        mode = stat.S_IMODE(st.st_mode) & ~HANDOVER_FILE_DROP
        if self._records(where):
            mode = group_reads_like_owner(mode)
        try:
            if not pinned.chown_entry(dir_fd, name, self.uid, self.gid, mode, st):
                return SKIPPED  # swapped, linked or gone since it was listed
        except OSError as exc:
            self.report.fail(path, f"cannot hand over: {exc.strerror or exc}")
            return UNCHANGED
        self.result.handed_over += 1
        return CHANGED

    def _records(self, where: str) -> bool:
        """Whether ``where`` (a directory's path) is in one of Jazz's record directories."""
        if not where.startswith(self.home + "/"):
            return False
        return where[len(self.home) + 1 :].split("/", 1)[0] in HANDOVER_GROUP_READABLE

    def not_regular(self, dir_fd: int, entry: os.DirEntry[str], where: str) -> None:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            return  # gone: nothing to hand over
        if stat.S_ISLNK(st.st_mode) or st.st_uid != self.gateway_uid:
            return
        self.result.special += 1
        self._name(
            "%s is not a regular file or directory (%s): left the gateway's, not handed to uid %d",
            shown(f"{where}/{entry.name}"),
            stat.filemode(st.st_mode),
            self.uid,
        )

    def _name(self, message: str, *args: object) -> None:
        self._named += 1
        if self._named <= MAX_NAMED:
            log.warning(message, *args)
        elif self._named == MAX_NAMED + 1:
            log.warning("%s: more entries left the gateway's; not named", self.home)


def _marker_present(home_fd: int, gateway_uid: int) -> bool:
    try:
        st = os.stat(HANDOVER_MARKER, dir_fd=home_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == gateway_uid and st.st_nlink == 1


def _write_marker(home_fd: int, gateway_uid: int, uid: int) -> None:
    """Create the marker (``O_EXCL``, never through a link) and flush it and the home."""
    data = (
        json.dumps(
            {
                "version": MARKER_VERSION,
                "fromUid": gateway_uid,
                "toUid": uid,
                "startedAt": datetime.now(UTC).isoformat(timespec="seconds"),
            }
        )
        + "\n"
    ).encode()
    try:
        fd = os.open(HANDOVER_MARKER, _MARKER_OPEN, HANDOVER_MARKER_MODE, dir_fd=home_fd)
    except FileExistsError:
        # Something not ours has the name (checked by the caller): replace it.
        try:
            os.unlink(HANDOVER_MARKER, dir_fd=home_fd)
        except IsADirectoryError as exc:
            raise OSError(errno.EISDIR, f"{HANDOVER_MARKER} is a directory") from exc
        fd = os.open(HANDOVER_MARKER, _MARKER_OPEN, HANDOVER_MARKER_MODE, dir_fd=home_fd)
    try:
        os.fchmod(fd, HANDOVER_MARKER_MODE)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.fsync(home_fd)  # the marker is on disk before the home changes hands
