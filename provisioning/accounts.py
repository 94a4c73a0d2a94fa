"""One Unix account per conversation, and the map that remembers which is whose.

With root and isolation on, each conversation runs under its own system account (nologin,
no home made by useradd, a private primary group that is never the operator group), so
"other" bits mean nothing is readable across conversations while the operator group reads
every home. The conversation -> uid map is a state file under the root's ``state/``:

* accounts missing from ``/etc/passwd`` (a rebuilt container) are recreated from it;
* an unreadable map is moved aside and rebuilt from the owners of the homes on disk;
* a uid that owns a home is never handed to another conversation, and a uid or name that
  some other account on the host already has is never taken over.

Accounts of archived conversations are given back (:mod:`provisioning.reclaim`): once the
home's tarball is whole and its directory gone, the account's processes are killed, the
account and its private group deleted, and the map moves the entry from ``accounts`` to
``archived`` (who it was: name, uid, gid) and records the uid in ``freedUids`` (whose it
was last, and since when). The map is written first, so a crash before ``userdel`` leaves
an account the next start (:meth:`AccountRegistry.finish_reclaims`) deletes; one before the
map is written leaves an archived home with a live account, which the next start reclaims.
Only ``accounts`` count as used (:meth:`AccountRegistry.usage`).

Handing uids out, the rule:

* a restored conversation gets its old uid back when no live account holds it and no other
  account on the host took it; otherwise a uid as a new conversation would, and its files
  from the tarball are given to that account (:class:`~provisioning.archive_restore.Reowning`);
* a new conversation gets a never-used uid of the range first (the lowest); a freed one only
  when none is left, the one freed longest ago first;
* a freed uid goes to a conversation other than its last holder only once nothing of that
  holder is left (:mod:`provisioning.leftovers`): its files and IPC objects in the
  world-writable places deleted, then every process of the uid killed and none found with
  the uid or its group. When that fails the uid is passed over and stays freed. Given back to
  its own last holder, only the processes are killed and checked (a process made from a
  setuid file meanwhile would act as the conversation).

The files are deleted when the uid is handed to another conversation (under the map's
lock, so nothing else takes the uid meanwhile), not when it is freed: the walk of ``/tmp``
costs time in proportion to what is there (minutes on a host with a million entries), and an
archive (``jazz-bridge homes archive``, the retention sweep) held the map's lock for all of
it, so no conversation could get an account meanwhile. A new conversation takes a never-used
uid first, so it waits for a walk only once the range's never-used uids are all gone.

This module is the registry (:class:`AccountRegistry`) and what it promises; the parts are
their own modules: the map's state file, lock and rebuild (:mod:`provisioning.uid_map`),
which uid to hand out (:mod:`provisioning.allocation`), the clearing of freed uids
(:mod:`provisioning.freed_uids`) and the ``useradd``/``groupadd``/``userdel`` calls and
``/etc/passwd`` lookups (:mod:`provisioning.system_accounts`). The names other code uses
are all importable from here (``__all__``).
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

from . import archive
from .allocation import allocate
from .errors import AccountError, UidTaken
from .layout import Layout
from .system_accounts import (
    ACCOUNT_COMMENT,
    Account,
    Killer,
    delete_account,
    gr_by_name,
    materialize,
    pw_by_name,
    pw_by_uid,
    run,
)
from .uid_map import UidMap, entry_gid, now, to_account

__all__ = [
    "DEFAULT_UID_RANGE",
    "USAGE_WARN_AT",
    "AccountRegistry",
    "current_account",
    "map_path",
]

log = logging.getLogger(__name__)

DEFAULT_UID_RANGE = (70000, 79999)
MAX_ALLOCATIONS = 3  # uids tried for a new home whose uid another account took meanwhile

# the shares of the uid range whose passing is warned of (logs; doctor warns from the first)
USAGE_WARN_AT = (0.8, 0.9, 0.95, 0.99, 1.0)


class AccountRegistry:
    """Creates and remembers conversation accounts for one root. Thread-safe."""

    def __init__(
        self,
        layout: Layout,
        operator_gid: int,
        uid_range: tuple[int, int] = DEFAULT_UID_RANGE,
        *,
        kill: Killer | None = None,
    ) -> None:
        """``kill``: how every process of an account is killed before the account is deleted
        or its uid handed out again (the bridge's ``kill_accounts``; provisioning cannot
        import it). Without one an account with processes is kept, and a freed uid with
        processes is passed over."""
        lo, hi = uid_range
        if not (1000 <= lo <= hi < 2**31 - 1):
            raise AccountError(f"uid range {lo}-{hi} is not a usable range of system uids")
        self.layout = layout
        self.operator_gid = operator_gid
        self.uid_range = uid_range
        self._kill = kill
        self._map = UidMap(layout, uid_range)

    # -- lookups ------------------------------------------------------------------------------

    def get(self, home: str) -> Account | None:
        with self._map.locked():
            entry = self._map.accounts.get(home)
        return to_account(entry) if entry else None

    def all(self) -> dict[str, Account]:
        with self._map.locked():
            return {home: to_account(entry) for home, entry in self._map.accounts.items()}

    def owned_uids(self) -> set[int]:
        """uids of the mapped accounts that are still theirs: the system's entry for the uid
        has the name the map recorded. A uid another account took since (the map keeps
        the entry, see :meth:`recreate_missing`) is not this gateway's to act on."""
        owned = set()
        for account in self.all().values():
            pw = pw_by_uid(account.uid)
            if account.uid > 0 and pw is not None and pw.pw_name == account.name:
                owned.add(account.uid)
        return owned

    # -- creation -----------------------------------------------------------------------------

    def usage(self) -> tuple[int, int]:
        """How many uids of the range live conversation accounts hold, and how many it has.

        An archived conversation gives its uid back, but the live ones still fill a range:
        :meth:`ensure` warns as it passes :data:`USAGE_WARN_AT` of it (and doctor, and the
        gateway's ``/metrics``), before new conversations can no longer start.
        """
        lo, hi = self.uid_range
        with self._map.locked():
            used = sum(1 for e in self._map.accounts.values() if lo <= int(e["uid"]) <= hi)
        return used, hi - lo + 1

    def _warn_when_filling(self, used_before: int) -> None:
        """One warning per step (80%, 90%, 95%, 99%, full) the range's use just passed."""
        lo, hi = self.uid_range
        capacity = hi - lo + 1
        used = used_before + 1
        passed = [f for f in USAGE_WARN_AT if used_before < f * capacity <= used]
        if passed:
            log.warning(
                "conversation accounts hold %d of the %d uids of %d-%d (%d%%): once all are "
                "taken no new conversation can start; widen accounts.uid_min..uid_max into "
                "uids no other account uses",
                used,
                capacity,
                lo,
                hi,
                int(100 * used / capacity),
            )

    def ensure(self, home: str, thread_key: str | None = None) -> Account:
        """The account of ``home``, created (or recreated) when missing.

        The map is written before the account is made (a crash in between recreates the same
        one). If, by then, another account holds that uid or gid (another gateway on this
        host with an overlapping range, or an admin) and the home has no files yet, another
        uid is taken; a home with files keeps its uid and the conflict is an error to resolve.
        """
        with self._map.locked():
            entry = self._map.accounts.get(home)
            if entry is None:
                lo, hi = self.uid_range
                used = sum(1 for e in self._map.accounts.values() if lo <= int(e["uid"]) <= hi)
                entry = allocate(self._map, self.operator_gid, self._kill, home, thread_key)
                self._map.accounts[home] = entry
                self._map.save()
                self._warn_when_filling(used)
            elif thread_key and entry.get("threadKey") != thread_key:
                entry["threadKey"] = thread_key
                self._map.save()
            for attempt in range(1, MAX_ALLOCATIONS + 1):
                try:
                    materialize(self.layout, self.operator_gid, home, entry)
                    return to_account(entry)
                except UidTaken as exc:
                    # a tarball's files keep their uid, unless its account was reclaimed: the
                    # restore then gives them to the account it has now (archive_restore.Reowning)
                    has_files = os.path.lexists(self.layout.home(home)) or (
                        home not in self._map.archived
                        and archive.tarball_path(self.layout, home).exists()
                    )
                    if has_files or attempt == MAX_ALLOCATIONS:
                        raise
                    log.warning("%s; home %s has no files yet: taking another uid", exc, home)
                    del self._map.accounts[home]  # not counted as used by the next allocation
                    blocked = int(entry["uid"])
                    entry = allocate(
                        self._map, self.operator_gid, self._kill, home, thread_key, avoid={blocked}
                    )
                    self._map.accounts[home] = entry
                    self._map.save()
            raise AssertionError("unreachable")  # the loop returns or raises

    def recreate_missing(self) -> list[Account]:
        """At start: recreate every mapped account that /etc/passwd lost. Returns those made."""
        made: list[Account] = []
        with self._map.locked():
            for home, entry in self._map.accounts.items():
                if pw_by_name(str(entry["name"])) is None:
                    try:
                        materialize(self.layout, self.operator_gid, home, entry)
                    except AccountError as exc:
                        log.error("%s", exc)
                        continue
                    made.append(to_account(entry))
            if made:
                self._map.save()
        return made

    def archived(self, home: str) -> Account | None:
        """The account ``home`` had when it was archived and its account reclaimed."""
        with self._map.locked():
            entry = self._map.archived.get(home)
        return to_account(entry) if entry else None

    def restored(self, home: str) -> None:
        """``home`` is back from its tarball with its live account: forget the old one."""
        with self._map.locked():
            if self._map.archived.pop(home, None) is not None:
                self._map.save()

    def reclaim(self, home: str) -> Account | None:
        """Give back the account of archived ``home``: the map first (the entry moves to
        ``archived``, its uid to ``freedUids``), then its processes killed, the account and
        its private group deleted. Returns the account, or None when it had none.

        The caller holds the home's archive lock exclusively and has seen the home
        archived (:mod:`provisioning.reclaim`). AccountError when the account could not be
        deleted: the map says it is archived already, and :meth:`finish_reclaims` deletes it.
        """
        with self._map.locked():
            entry = self._map.accounts.pop(home, None)
            if entry is None:
                return None
            account = to_account(entry)
            self._map.archived[home] = {
                "name": account.name,
                "uid": account.uid,
                "gid": account.gid,
                "threadKey": entry.get("threadKey"),
                "archivedAt": now(),
            }
            owner = pw_by_uid(account.uid)
            if owner is None or owner.pw_name == account.name:  # not another account's uid
                self._map.freed[account.uid] = {"home": home, "gid": account.gid, "freedAt": now()}
            self._map.save()
            delete_account(home, account, self.operator_gid, self._kill)
        log.info(
            "reclaimed account %s (uid %d) of archived home %s", account.name, account.uid, home
        )
        return account

    def finish_reclaims(self) -> list[Account]:
        """Delete the accounts the map says are archived that still exist (a crash, or a
        kill that failed, between the map and ``userdel``). Returns those deleted; one that
        still cannot be is logged and kept for the next time."""
        done: list[Account] = []
        with self._map.locked():
            for home, entry in self._map.archived.items():
                if home in self._map.accounts:
                    continue  # restored meanwhile (the archived record is stale)
                account = to_account(entry)
                pw = pw_by_name(account.name)
                if (
                    pw is None
                    or pw.pw_uid != account.uid
                    or not pw.pw_gecos.startswith(ACCOUNT_COMMENT)
                ):
                    continue
                try:
                    delete_account(home, account, self.operator_gid, self._kill)
                except AccountError as exc:
                    log.error("%s", exc)
                    continue
                done.append(account)
        for account in done:
            log.warning(
                "deleted account %s (uid %d) of an archived home, left by an archiving cut off",
                account.name,
                account.uid,
            )
        return done

    def delete_system_accounts(self) -> list[tuple[str, Account]]:
        """Delete from ``/etc/passwd`` (and their private groups) every account of this
        root: the map's live ones whose uid is in the range and whose system entry is still
        theirs (the name and uid the map recorded, made by this gateway), killed first; no
        other account is touched. The map keeps them, so the next start (or ``jazz-bridge
        repair``) makes them again with the same uids, and their homes are theirs again.
        Returns ``(home, account)`` of each deleted; AccountError for one that could not be
        (the ones before it stay deleted)."""
        lo, hi = self.uid_range
        done: list[tuple[str, Account]] = []
        with self._map.locked():
            for home, entry in sorted(self._map.accounts.items()):
                account = to_account(entry)
                pw = pw_by_name(account.name)
                if not (lo <= account.uid <= hi) or pw is None or pw.pw_uid != account.uid:
                    continue
                if not pw.pw_gecos.startswith(ACCOUNT_COMMENT):
                    continue
                delete_account(home, account, self.operator_gid, self._kill)
                done.append((home, account))
        done += [("", account) for account in self.finish_reclaims()]
        return done

    def remove(self, home: str) -> None:
        """Delete a conversation's account and forget it (tests)."""
        with self._map.locked():
            entry = self._map.accounts.pop(home, None)
            if entry is None:
                return
            name = str(entry["name"])
            pw = pw_by_name(name)
            if pw is not None and pw.pw_uid == int(entry["uid"]):
                run(["userdel", name])
            if gr_by_name(name) is not None:
                subprocess.run(["groupdel", name], capture_output=True, check=False)
            self._map.freed[int(entry["uid"])] = {
                "home": home,
                "gid": entry_gid(entry),
                "freedAt": now(),
            }
            self._map.save()


def current_account() -> Account:
    """The gateway's own account (single-account mode)."""
    uid, gid = os.geteuid(), os.getegid()
    pw = pw_by_uid(uid)
    return Account(pw.pw_name if pw else str(uid), uid, gid)


def map_path(layout: Layout) -> Path:
    return layout.uid_map
