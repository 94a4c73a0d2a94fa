"""The deep home walk: the Jazz CLI's permission rule applied to everything in a home.

In a setgid home (isolated) only "other" bits are cleared, so operators keep group read; in
a private home group and other bits are cleared. The owner's bits, execute included, stay;
setuid/setgid are stripped from regular files. Links, other accounts' files, hard links to
files of others, FIFOs, sockets and devices are left alone and never opened. The walk is
pinned by directory descriptors: a conversation swapping a directory for a link mid-walk
gets its swap skipped, never followed.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from . import pinned
from .modes import GROUP_BITS, OTHER_BITS, REPAIR_MARKER, SPECIAL_EXEC_BITS

MAX_DEPTH = 4096
MAX_ERRORS = 50
MARKER_VERSION = 1


@dataclass
class WalkReport:
    checked: int = 0
    changed: int = 0
    skipped: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    skipped_by_marker: bool = False

    def merge(self, other: WalkReport) -> None:
        self.checked += other.checked
        self.changed += other.changed
        self.skipped += other.skipped
        self.failed += other.failed
        room = MAX_ERRORS - len(self.errors)
        if room > 0:
            self.errors.extend(other.errors[:room])

    def as_dict(self) -> dict[str, int]:
        return {
            "checked": self.checked,
            "changed": self.changed,
            "skipped": self.skipped,
            "failed": self.failed,
        }

    def fail(self, where: str, why: str) -> None:
        self.failed += 1
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(f"{where}: {why}")


def _marker_present(home_fd: int) -> bool:
    try:
        st = os.stat(REPAIR_MARKER, dir_fd=home_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode)


def _write_marker(home_fd: int, owner_uid: int, setgid_home: bool) -> None:
    mode = 0o640 if setgid_home else 0o600
    try:
        st = os.stat(REPAIR_MARKER, dir_fd=home_fd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            os.unlink(REPAIR_MARKER, dir_fd=home_fd)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        return
    data = json.dumps(
        {"version": MARKER_VERSION, "repairedAt": datetime.now(UTC).isoformat(timespec="seconds")}
    ).encode()
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(REPAIR_MARKER, flags, mode, dir_fd=home_fd)
    except OSError:
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        os.write(fd, data + b"\n")
        if os.geteuid() == 0:
            os.fchown(fd, owner_uid, -1)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def repair_home_tree(
    home: Path, *, setgid_home: bool, owner_uid: int, force: bool = False
) -> WalkReport:
    """Walk ``home`` and apply the rule; see the module docstring. Blocking."""
    report = WalkReport()
    home_fd = pinned.open_dir(home)
    try:
        if not force and _marker_present(home_fd):
            report.skipped_by_marker = True
            return report
        clear = OTHER_BITS if setgid_home else (OTHER_BITS | GROUP_BITS)
        st = os.fstat(home_fd)
        report.checked += 1
        _walk(home_fd, str(home), st, clear, owner_uid, report, 0)
        if report.failed == 0:
            _write_marker(home_fd, owner_uid, setgid_home)
    finally:
        os.close(home_fd)
    return report


def _walk(
    dir_fd: int,
    where: str,
    dir_st: os.stat_result,
    clear: int,
    owner_uid: int,
    report: WalkReport,
    depth: int,
) -> None:
    # fix the directory itself through its pinned descriptor
    if dir_st.st_uid == owner_uid:
        mode = stat.S_IMODE(dir_st.st_mode)
        want = mode & ~clear
        if want != mode:
            try:
                os.fchmod(dir_fd, want)
                report.changed += 1
            except OSError as exc:
                report.fail(where, exc.strerror or str(exc))
    if depth >= MAX_DEPTH:
        report.fail(where, f"deeper than {MAX_DEPTH} levels; not walked further")
        return
    try:
        entries = list(os.scandir(dir_fd))
    except OSError as exc:
        report.fail(where, exc.strerror or str(exc))
        return
    for entry in entries:
        name = entry.name
        if depth == 0 and name == REPAIR_MARKER:
            continue
        report.checked += 1
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed by the conversation meanwhile
        except OSError as exc:
            report.fail(f"{where}/{name}", exc.strerror or str(exc))
            continue
        fmt = stat.S_IFMT(st.st_mode)
        if fmt == stat.S_IFDIR:
            try:
                child = os.open(name, pinned.DIR_FLAGS, dir_fd=dir_fd)
            except FileNotFoundError:
                continue
            except OSError as exc:
                # ELOOP/ENOTDIR: swapped for a link or file since the listing
                report.skipped += 1
                if exc.errno not in (40, 20):
                    report.fail(f"{where}/{name}", exc.strerror or str(exc))
                continue
            try:
                cst = os.fstat(child)
                if (cst.st_dev, cst.st_ino) != (st.st_dev, st.st_ino):
                    report.skipped += 1  # swapped: not the directory we listed
                    continue
                _walk(child, f"{where}/{name}", cst, clear, owner_uid, report, depth + 1)
            finally:
                os.close(child)
            continue
        if fmt != stat.S_IFREG or st.st_uid != owner_uid:
            report.skipped += 1  # links, FIFOs, sockets, devices, other accounts' files
            continue
        mode = stat.S_IMODE(st.st_mode)
        want = mode & ~clear & ~SPECIAL_EXEC_BITS
        if want == mode:
            continue
        try:
            if pinned.chmod_entry(dir_fd, name, want, st):
                report.changed += 1
            else:
                report.skipped += 1
        except FileNotFoundError:
            continue
        except OSError as exc:
            report.fail(f"{where}/{name}", exc.strerror or str(exc))
