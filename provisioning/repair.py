"""The entrypoint repair (every start) and, with ``deep``, the walk of every home.

Whatever happened since the last start (an operator's ``chmod``, a restore from backup, a
conversation loosening its own files) the root goes back to the table in docs/design.md: the
root and ``chats/`` ``2751``, personas ``0755``, "other" bits off everything else at the
top, each home ``2750 conv:O`` (``0700`` single-account). The deep walk is
:mod:`provisioning.walk`; ``jazz-bridge repair --deep`` walks every home, while the gateway
starts with the shallow repair only and walks each home when it first provisions that
conversation (``Homes.ensure``), so a start does not read 10,000 homes.

Isolated, it first finishes what an archiving cut off by a crash left of an account: the
account of a home found archived is given back, one the map says was given back is deleted
(:func:`provisioning.reclaim.repair_reclaims`).

An isolated root's home still owned by the gateway (made with isolation off) is marked for
its handover (:mod:`provisioning.handover`) before it is given to its account; the handover
itself runs at the conversation's next ``Homes.ensure`` or here with ``deep``, which also
finishes one that was interrupted.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass, field

from . import handover, naming, pinned, reclaim
from .accounts import AccountRegistry
from .errors import ProvisioningError
from .layout import CHATS_DIR, PERSONAS_DIR, TOOLS_DIR, RootInfo, init_root
from .modes import HOME_MODE, OTHER_BITS, PRIVATE_DIR_MODE
from .walk import WalkReport, repair_home_tree
from .walk_report import MAX_ERRORS, MAX_SKIPS

log = logging.getLogger(__name__)


@dataclass
class RepairReport:
    homes: int = 0
    top: WalkReport = field(default_factory=WalkReport)
    deep: WalkReport = field(default_factory=WalkReport)

    def as_dict(self) -> dict[str, object]:
        total = WalkReport()
        total.merge(self.top)
        total.merge(self.deep)
        return {
            "homes": self.homes,
            **total.as_dict(),
            "top": self.top.as_dict(),
            "deep": self.deep.as_dict(),
            "errors": (self.top.errors + self.deep.errors)[:MAX_ERRORS],
            "skips": (self.top.skips + self.deep.skips)[:MAX_SKIPS],
        }

    @property
    def skips(self) -> list[str]:
        """What was left alone and why, at most ``MAX_SKIPS`` (the rest only counted)."""
        return (self.top.skips + self.deep.skips)[:MAX_SKIPS]

    @property
    def ok(self) -> bool:
        return self.top.failed == 0 and self.deep.failed == 0


def repair(
    root: RootInfo,
    *,
    isolated: bool,
    registry: AccountRegistry | None = None,
    deep: bool = False,
    force: bool = False,
) -> RepairReport:
    """Repair the root and every home; with ``deep``, walk each home too."""
    root = init_root(root.layout.root, root.operator_group)
    report = RepairReport()
    _strip_top_level(root, report.top)
    if isolated and registry is not None:
        try:
            reclaim.repair_reclaims(root, registry)
        except (OSError, ProvisioningError) as exc:
            _fail(report.top, f"accounts of archived homes: {exc}")
    accounts = registry.all() if (isolated and registry is not None) else {}
    owner_uid = os.geteuid()
    with pinned.opened_dir(root.layout.chats) as chats_fd:
        for entry in sorted(os.scandir(chats_fd), key=lambda e: e.name):
            if not naming.is_home_name(entry.name):
                continue
            report.top.checked += 1
            home_path = root.layout.chats / entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                _fail(report.top, f"{root.layout.chats / entry.name}: {exc.strerror}")
                continue
            if not stat.S_ISDIR(st.st_mode):
                report.top.skipped += 1
                report.top.note_skip(str(home_path), "not a directory: left alone")
                log.warning("%s is not a directory; left alone", root.layout.chats / entry.name)
                continue
            if isolated:
                account = accounts.get(entry.name)
                if account is None:
                    report.top.skipped += 1
                    report.top.note_skip(
                        str(home_path),
                        f"no account in {root.layout.uid_map}: left alone (jazz-bridge homes "
                        "ensure KEY repairs it)",
                    )
                    log.warning(
                        "home %s has no account in %s; left alone (jazz-bridge homes ensure "
                        "KEY repairs it)",
                        root.layout.chats / entry.name,
                        root.layout.uid_map,
                    )
                    continue
                uid, gid, mode = account.uid, root.operator_gid, HOME_MODE
            else:
                uid, gid, mode = owner_uid, None, PRIVATE_DIR_MODE
            report.homes += 1
            try:
                # most homes: nothing to open at start (an ACL, which a stat does not show,
                # is the home's own to set: it could shut the operators out)
                due = not _already(st, mode, uid, gid) or pinned.has_acl(home_path)
            except OSError as exc:
                _fail(report.top, f"{home_path}: {exc.strerror}")
                continue
            if due:
                try:
                    with pinned.opened_dir(entry.name, chats_fd) as home_fd:
                        if isolated:  # before the home changes hands: see handover.py
                            handover.mark_if_adopted(
                                home_fd, str(home_path), uid=uid, gateway_uid=owner_uid
                            )
                        if pinned.set_owner_and_mode(home_fd, mode, uid, gid, drop_acl=True):
                            report.top.changed += 1
                except (OSError, ProvisioningError) as exc:
                    _fail(report.top, f"{root.layout.chats / entry.name}: {exc}")
                    continue
            if deep:
                try:
                    if isolated:
                        with pinned.opened_dir(entry.name, chats_fd) as home_fd:
                            handed = handover.hand_over(
                                home_fd,
                                str(home_path),
                                uid=uid,
                                gid=root.operator_gid,
                                gateway_uid=owner_uid,
                            )
                        if handed is not None:
                            report.deep.merge(handed.walk)
                    walked = repair_home_tree(
                        root.layout.chats / entry.name,
                        setgid_home=isolated,
                        owner_uid=uid,
                        force=force,
                    )
                except (OSError, ProvisioningError) as exc:
                    _fail(report.deep, f"{root.layout.chats / entry.name}: {exc}")
                    continue
                report.deep.merge(walked)
    return report


def _already(st: os.stat_result, mode: int, uid: int, gid: int | None) -> bool:
    """Whether the listing's ``lstat`` of a home already matches the table."""
    return (
        st.st_uid == uid and (gid is None or st.st_gid == gid) and stat.S_IMODE(st.st_mode) == mode
    )


def _strip_top_level(root: RootInfo, report: WalkReport) -> None:
    """Clear "other" bits of every top-level entry except chats/ and personas/."""
    with pinned.opened_dir(root.layout.root) as root_fd:
        for entry in os.scandir(root_fd):
            if entry.name in (CHATS_DIR, PERSONAS_DIR, TOOLS_DIR):
                continue
            report.checked += 1
            try:
                st = entry.stat(follow_symlinks=False)
                mode = stat.S_IMODE(st.st_mode)
                if stat.S_ISLNK(st.st_mode) or not mode & OTHER_BITS:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    with pinned.opened_dir(entry.name, root_fd) as fd:
                        os.fchmod(fd, mode & ~OTHER_BITS)
                elif not pinned.chmod_entry(root_fd, entry.name, mode & ~OTHER_BITS, st):
                    report.skipped += 1
                    report.note_skip(
                        str(root.layout.root / entry.name), "replaced while repaired; left alone"
                    )
                    continue
                report.changed += 1
            except (OSError, ProvisioningError) as exc:
                _fail(report, f"{root.layout.root / entry.name}: {exc}")


def _fail(report: WalkReport, message: str) -> None:
    report.failed += 1
    if len(report.errors) < 50:
        report.errors.append(message)
    log.error("repair: %s", message)
