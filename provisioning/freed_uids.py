"""What a given-back uid's last conversation left behind, cleared before the uid is reused.

Split out of :mod:`provisioning.accounts` (whose docstring says the rule): a freed uid goes
to a conversation other than its last holder only once nothing of that holder is left
(:mod:`provisioning.leftovers`): its files and IPC objects in the world-writable places
deleted, then every process of the uid killed and none found with the uid or its group.
Given back to its own last holder, only the processes are killed and checked.

The files are deleted at the allocation to another conversation (:func:`fit_for`), under
the map's lock, never at the reclaim: a walk of ``/tmp`` may take minutes on a full host,
and the archive that frees a uid must not hold the map (every new conversation's account)
for that long (:mod:`provisioning.accounts`).
"""

from __future__ import annotations

import logging
import time

from . import leftovers
from .system_accounts import Killer
from .uid_map import UidMap

log = logging.getLogger("provisioning.accounts")  # the registry's log, as before the split


def fit_for(uids: UidMap, kill: Killer | None, uid: int, home: str) -> bool:
    """Make freed ``uid`` fit to be ``home``'s (see the module docstring); False: it is
    not (logged), and another uid is taken."""
    record = uids.freed.get(uid, {})
    gid = int(record.get("gid", uid))
    # a process of the uid now (made from a setuid file since, say) is killed before the
    # walk, so it writes nothing after it
    running = leftovers.processes_of(uid, gid)
    problems = kill_uid(kill, uid) if running else ""
    if not problems and record.get("home") != home:
        report = walk_leftovers(uid, gid, str(record.get("home", "?")), home)
        if not report.ok:
            problems = report.problems()
    if not problems:
        problems = kill_uid(kill, uid)
    if not problems:
        pids = leftovers.processes_of(uid, gid)
        if pids:
            problems = f"processes {pids[:5]} still run with uid or gid {uid}"
    if problems:
        log.warning(
            "freed uid %d is not handed to home %s: %s; another uid is taken (the uid is "
            "tried again at a later allocation)",
            uid,
            home,
            problems,
        )
        return False
    return True


def kill_uid(kill: Killer | None, uid: int) -> str:
    """Kill every process of ``uid`` with the bridge's killer (none without one); what
    went wrong, or ""."""
    if kill is None:
        return ""
    try:
        kill([uid])
    except OSError as exc:
        return str(exc)
    return ""


def walk_leftovers(uid: int, gid: int, last_home: str, next_home: str) -> leftovers.LeftoverReport:
    """:func:`leftovers.clear_files` for ``uid``, logged when it found anything."""
    started = time.monotonic()
    report = leftovers.clear_files(uid, gid)
    if report.removed or report.given_away or report.ipc_removed:
        log.warning(
            "uid %d (last home %s) left %d entries and %d IPC objects outside its home: "
            "deleted (%d given to root) in %.1f s, before the uid goes to home %s",
            uid,
            last_home,
            report.removed,
            report.ipc_removed,
            report.given_away,
            time.monotonic() - started,
            next_home,
        )
    return report
