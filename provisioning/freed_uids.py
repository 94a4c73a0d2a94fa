"""What a given-back uid's last conversation left behind, cleared before the uid is reused.

Split out of :mod:`provisioning.accounts` (whose docstring says the rule): a freed uid goes
to a conversation other than its last holder only once nothing of that holder is left
(:mod:`provisioning.leftovers`): its files and IPC objects in the world-writable places
deleted, then every process of the uid killed and none found with the uid or its group.
Given back to its own last holder, only the processes are killed and checked.

The files are deleted when the uid is freed, by the reclaim itself
(:func:`clear_at_reclaim`, under the map's lock once the account is gone and its processes
killed, so no allocation can hand the uid out meanwhile), and the uid's ``freedUids``
record says so (``clearedAt``): the walk of ``/tmp`` costs time in proportion to what is
there, and a new conversation would otherwise wait for it at its first message. At the
allocation to another conversation (:func:`fit_for`) a cleared uid with no process only has
its IPC objects cleared; a uid freed another way (a crash before the clearing, a rebuilt
map, a clearing that failed), or with a process found running, is walked again.
"""

from __future__ import annotations

import logging
import time

from . import leftovers
from .system_accounts import Killer
from .uid_map import UidMap, now

log = logging.getLogger("provisioning.accounts")  # the registry's log, as before the split


def fit_for(uids: UidMap, kill: Killer | None, uid: int, home: str) -> bool:
    """Make freed ``uid`` fit to be ``home``'s (see the module docstring); False: it is
    not (logged), and another uid is taken."""
    record = uids.freed.get(uid, {})
    gid = int(record.get("gid", uid))
    # a process of the uid now (made from a setuid file since, say) is killed before the
    # walk, so it writes nothing after it; and it may have left new files since the
    # uid's clearing (clearedAt): then the walk again
    running = leftovers.processes_of(uid, gid)
    problems = kill_uid(kill, uid) if running else ""
    if not problems and record.get("home") != home:
        if record.get("clearedAt") and not running:
            report = leftovers.clear_ipc(uid, gid)  # costs nothing
        else:
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


def clear_at_reclaim(uids: UidMap, uid: int, home: str) -> None:
    """Delete what just-freed ``uid`` left outside ``home`` now, and note it in its
    ``freedUids`` record (see the module docstring). Under the map's lock, the account
    deleted. A clearing that fails is logged; the uid's allocation walks again."""
    record = uids.freed.get(uid)
    if record is None:
        return  # another account's uid now: not ours to clear
    report = walk_leftovers(uid, int(record.get("gid", uid)), home, None)
    if not report.ok:
        log.warning(
            "what freed uid %d (last home %s) left outside its home could not all be "
            "deleted: %s; it is tried again before the uid serves another conversation",
            uid,
            home,
            report.problems(),
        )
        return
    record["clearedAt"] = now()
    uids.save()


def walk_leftovers(
    uid: int, gid: int, last_home: str, next_home: str | None
) -> leftovers.LeftoverReport:
    """:func:`leftovers.clear_files` for ``uid``, logged when it found anything."""
    started = time.monotonic()
    report = leftovers.clear_files(uid, gid)
    if report.removed or report.given_away or report.ipc_removed:
        log.warning(
            "uid %d (last home %s) left %d entries and %d IPC objects outside its home: "
            "deleted (%d given to root) in %.1f s, %s",
            uid,
            last_home,
            report.removed,
            report.ipc_removed,
            report.given_away,
            time.monotonic() - started,
            f"before the uid goes to home {next_home}" if next_home else "as it was freed",
        )
    return report
