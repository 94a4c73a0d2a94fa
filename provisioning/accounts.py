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
  from the tarball are given to that account (:class:`~provisioning.archive.Reowning`);
* a new conversation gets a never-used uid of the range first (the lowest); a freed one only
  when none is left, the one freed longest ago first;
* a freed uid goes to a conversation other than its last holder only once nothing of that
  holder is left (:mod:`provisioning.leftovers`): its files and IPC objects in the
  world-writable places deleted, then every process of the uid killed and none found with
  the uid or its group. When that fails the uid is passed over and stays freed. Given back to
  its own last holder, only the processes are killed and checked (a process made from a
  setuid file meanwhile would act as the conversation).

The files are deleted when the uid is freed, by the reclaim itself (under the map's lock,
once the account is gone and its processes killed, so no allocation can hand the uid out
meanwhile), and the uid's ``freedUids`` record says so (``clearedAt``). The walk of ``/tmp``
costs time in proportion to what is there (seconds on a busy host), and a new conversation
would otherwise wait for it at its first message. A uid freed another way (a crash before
the clearing, a rebuilt map, a clearing that failed) is walked at its allocation as before.
"""

from __future__ import annotations

import fcntl
import grp
import logging
import os
import pwd
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import archive, leftovers, naming, safefs
from .errors import AccountError, StateFileError, UidRangeExhausted, UidTaken
from .layout import Layout

log = logging.getLogger(__name__)

MAP_SCHEMA = 1
DEFAULT_UID_RANGE = (70000, 79999)
NOLOGIN_CANDIDATES = ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false")
ACCOUNT_COMMENT = "jazz-bridge conversation"
UID_MAX = 2**31 - 2  # above: (uid_t)-1 and friends, never an account's uid in the map
MAX_ALLOCATIONS = 3  # uids tried for a new home whose uid another account took meanwhile

Killer = Callable[[Iterable[int]], None]  # SIGKILLs every process of these uids, or raises


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int


def _nologin() -> str:
    for candidate in NOLOGIN_CANDIDATES:
        if os.path.exists(candidate):
            return candidate
    return "/bin/false"


LOCK_RETRIES = 10  # useradd/groupadd finding /etc/passwd or /etc/group locked by another tool


NOT_UNIQUE_EXIT = 4  # useradd: "UID already in use"; groupadd: "GID is already used"


def _run(argv: list[str], *, taken: str | None = None) -> None:
    """Run a shadow-utils command; AccountError when it fails.

    ``taken`` describes the uid/gid asked for: when the command says another account or
    group got it first (exit 4) that is :class:`UidTaken`, which :meth:`AccountRegistry.ensure`
    answers with another uid. The check before the command cannot see another gateway on
    this host (another root, its own map lock) or an admin picking the same free id in the
    same instant; the command itself is the only check that cannot race.
    """
    for attempt in range(LOCK_RETRIES):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode == 0 or "lock" not in proc.stderr.lower():
            break
        # another process (an admin's useradd, a package install) holds the shadow-utils
        # lock for a moment: wait and try again rather than fail the conversation
        time.sleep(0.05 * (attempt + 1))
    if proc.returncode == NOT_UNIQUE_EXIT and taken is not None:
        raise UidTaken(f"{taken} was taken by another account meanwhile: {proc.stderr.strip()}")
    if proc.returncode != 0:
        raise AccountError(
            f"{' '.join(argv)} failed (exit {proc.returncode}): {proc.stderr.strip()}"
        )


def _pw_by_name(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def _pw_by_uid(uid: int) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwuid(uid)
    except KeyError:
        return None


def _gr_by_name(name: str) -> grp.struct_group | None:
    try:
        return grp.getgrnam(name)
    except KeyError:
        return None


def _gr_by_gid(gid: int) -> grp.struct_group | None:
    try:
        return grp.getgrgid(gid)
    except KeyError:
        return None


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
        self._lock = threading.Lock()
        self._accounts: dict[str, dict[str, Any]] = {}  # live: home -> account
        self._archived: dict[str, dict[str, Any]] = {}  # home -> the account it had
        self._freed: dict[int, dict[str, Any]] = {}  # uid -> its last holder, since when

    # -- the map ------------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """In-process lock plus a file lock, so a CLI and a running gateway never race."""
        with self._lock:
            lock_path = self.layout.state / "accounts.lock"
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._reload()
                yield
            finally:
                os.close(fd)

    def _reload(self) -> None:
        """Read the map; a missing or unreadable one (moved aside) is rebuilt from disk."""
        document = safefs.read_json_state(self.layout.uid_map, MAP_SCHEMA)
        if document is None:
            self._accounts, self._archived = self._rebuild_from_disk()
            self._freed = {
                int(e["uid"]): {"home": home, "gid": _gid(e), "freedAt": _now(), "rebuilt": True}
                for home, e in self._archived.items()
                if int(e["uid"]) not in {int(a["uid"]) for a in self._accounts.values()}
            }
            if self._accounts or self._archived:
                self._save()
            return
        self._accounts = _entries(document.get("accounts", {}))
        for home, entry in self._accounts.items():
            self._check_gid(home, entry)
        self._archived = {
            home: entry
            for home, entry in _entries(document.get("archived", {})).items()
            if type(entry.get("gid", entry["uid"])) is int
        }
        freed = document.get("freedUids", {})
        self._freed = {
            int(uid): dict(record)
            for uid, record in (freed.items() if isinstance(freed, dict) else [])
            if isinstance(uid, str)
            and uid.isdigit()
            and 0 < int(uid) <= UID_MAX
            and isinstance(record, dict)
            and isinstance(record.get("home"), str)
        }

    def _check_gid(self, home: str, entry: dict[str, Any]) -> None:
        """A recorded gid must be a real one: the map is edited by hand (errors tell operators
        to), and a typo must stop the command with the file and entry named, not a traceback.

        Refused rather than dropped like a bad uid: the gid is the group the home's files
        are given, and guessing it (the uid? the account's?) could hand them to a stranger.
        A missing gid is the uid, as it always was.
        """
        if "gid" not in entry:
            return
        gid = entry["gid"]
        if type(gid) is not int or not 0 < gid <= UID_MAX:  # not a bool either
            raise StateFileError(
                f"the account map {self.layout.uid_map} gives home {home} (account "
                f"{entry['name']}) the gid {gid!r}, which is not a group id: fix that entry's "
                f'"gid" by hand (it is the account\'s primary group, usually its uid "uid": '
                f"{entry['uid']}) or remove the line, then run the command again"
            )

    def _save(self) -> None:
        safefs.atomic_write_json(
            self.layout.uid_map,
            {
                safefs.SCHEMA_KEY: MAP_SCHEMA,
                "root": str(self.layout.root),
                "uidRange": list(self.uid_range),
                "accounts": self._accounts,
                "archived": self._archived,
                "freedUids": {str(uid): record for uid, record in sorted(self._freed.items())},
            },
        )

    def _home_owners(self) -> dict[int, str]:
        """uid -> home name for every home directory on disk (links ignored)."""
        owners: dict[int, str] = {}
        try:
            entries = list(os.scandir(self.layout.chats))
        except FileNotFoundError:
            return owners
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and naming.is_home_name(entry.name):
                owners.setdefault(st.st_uid, entry.name)
        return owners

    def _rebuild_from_disk(self) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        """Recover the map from who owns which home; only uids inside our range count.

        Returns the live accounts and the archived conversations: a tarball whose home has no
        account (it was reclaimed) names the uid its home had (its first member's owner)."""
        lo, hi = self.uid_range
        rebuilt: dict[str, dict[str, Any]] = {}
        for uid, home in self._home_owners().items():
            if not lo <= uid <= hi:
                continue
            pw = _pw_by_uid(uid)
            if pw is not None and not pw.pw_gecos.startswith(ACCOUNT_COMMENT):
                # another account took the uid since (the conversation's own account was
                # lost with /etc/passwd): never recorded as the conversation's; the home's
                # own name is, and making it finds the uid taken ("never taken over")
                log.warning(
                    "home %s belongs to uid %d, now account %s, which is no conversation's",
                    home,
                    uid,
                    pw.pw_name,
                )
                pw = None
            name = pw.pw_name if pw else self._free_name(home, taken=set())
            rebuilt[home] = {
                "name": name,
                "uid": uid,
                "gid": pw.pw_gid if pw else uid,
                "created": _now(),
                "rebuilt": True,
            }
        # homes not on disk (archived) keep their accounts: /etc/passwd names each
        # conversation account's home directory, so a restored home gets its own uid back
        for pw in pwd.getpwall():
            home_dir = Path(pw.pw_dir)
            if (
                pw.pw_gecos.startswith(ACCOUNT_COMMENT)
                and lo <= pw.pw_uid <= hi
                and home_dir.parent == self.layout.chats
                and naming.is_home_name(home_dir.name)
                and home_dir.name not in rebuilt
            ):
                rebuilt[home_dir.name] = {
                    "name": pw.pw_name,
                    "uid": pw.pw_uid,
                    "gid": pw.pw_gid,
                    "created": _now(),
                    "rebuilt": True,
                }
        archived: dict[str, dict[str, Any]] = {}
        try:
            tarballs = sorted(os.listdir(self.layout.archive))
        except FileNotFoundError:
            tarballs = []
        taken = {str(e["name"]) for e in rebuilt.values()}
        for entry in tarballs:
            home = entry.removesuffix(archive.SUFFIX)
            if home == entry or home in rebuilt or not naming.is_home_name(home):
                continue
            packed_by = archive.archived_owner(self.layout, home)
            if packed_by is None or not lo <= packed_by <= hi:
                continue
            name = self._free_name(home, taken)
            taken.add(name)
            archived[home] = {"name": name, "uid": packed_by, "gid": packed_by, "rebuilt": True}
        if rebuilt or archived:
            log.warning(
                "rebuilt the account map %s from %d home(s) on disk and %d archived",
                self.layout.uid_map,
                len(rebuilt),
                len(archived),
            )
        return rebuilt, archived

    # -- lookups ------------------------------------------------------------------------------

    def get(self, home: str) -> Account | None:
        with self._locked():
            entry = self._accounts.get(home)
        return _account(entry) if entry else None

    def all(self) -> dict[str, Account]:
        with self._locked():
            return {home: _account(entry) for home, entry in self._accounts.items()}

    def owned_uids(self) -> set[int]:
        """uids of the mapped accounts that are still theirs: the system's entry for the uid
        has the name the map recorded. A uid another account took since (the map keeps
        the entry, see :meth:`recreate_missing`) is not this gateway's to act on."""
        owned = set()
        for account in self.all().values():
            pw = _pw_by_uid(account.uid)
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
        with self._locked():
            used = sum(1 for e in self._accounts.values() if lo <= int(e["uid"]) <= hi)
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
        with self._locked():
            entry = self._accounts.get(home)
            if entry is None:
                lo, hi = self.uid_range
                used = sum(1 for e in self._accounts.values() if lo <= int(e["uid"]) <= hi)
                entry = self._allocate(home, thread_key)
                self._accounts[home] = entry
                self._save()
                self._warn_when_filling(used)
            elif thread_key and entry.get("threadKey") != thread_key:
                entry["threadKey"] = thread_key
                self._save()
            for attempt in range(1, MAX_ALLOCATIONS + 1):
                try:
                    self._materialize(home, entry)
                    return _account(entry)
                except UidTaken as exc:
                    # a tarball's files keep their uid, unless its account was reclaimed: the
                    # restore then gives them to the account it has now (archive.Reowning)
                    has_files = os.path.lexists(self.layout.home(home)) or (
                        home not in self._archived
                        and archive.tarball_path(self.layout, home).exists()
                    )
                    if has_files or attempt == MAX_ALLOCATIONS:
                        raise
                    log.warning("%s; home %s has no files yet: taking another uid", exc, home)
                    del self._accounts[home]  # not counted as used by the next allocation
                    blocked = int(entry["uid"])
                    entry = self._allocate(home, thread_key, avoid={blocked})
                    self._accounts[home] = entry
                    self._save()
            raise AssertionError("unreachable")  # the loop returns or raises

    def _allocate(
        self, home: str, thread_key: str | None, avoid: set[int] | None = None
    ) -> dict[str, Any]:
        lo, hi = self.uid_range
        used = {int(e["uid"]) for e in self._accounts.values()} | (avoid or set())
        owners = self._home_owners()
        own_home_owner = next((u for u, h in owners.items() if h == home), None)
        if own_home_owner is not None and lo <= own_home_owner <= hi and own_home_owner not in used:
            # The home exists (map lost or shared storage): its owner is its account.
            pw = _pw_by_uid(own_home_owner)
            if pw is None or pw.pw_gecos.startswith(ACCOUNT_COMMENT):
                uid = own_home_owner
                name = pw.pw_name if pw else self._free_name(home, self._taken_names())
                self._freed.pop(uid, None)
                return _new_entry(name, uid, thread_key)
        blocked = used | set(owners) | {self.operator_gid}
        before = self._archived.get(home)
        if before is not None:
            entry = self._take_back(home, before, blocked, thread_key)
            if entry is not None:
                return entry
        for uid in self._candidates():
            if uid in blocked or _pw_by_uid(uid) is not None or _gr_by_gid(uid) is not None:
                continue
            if uid in self._freed and not self._clear_leftovers(uid, home):
                continue
            self._freed.pop(uid, None)
            return _new_entry(self._free_name(home, self._taken_names()), uid, thread_key)
        raise UidRangeExhausted(
            f"every uid in {lo}-{hi} is taken by a live conversation or another account (or "
            "holds what an archived conversation left, see the log); widen the range into uids "
            "no other account on this host uses: raise accounts.uid_max "
            "(JAZZ_BRIDGE_ACCOUNTS__UID_MAX) or lower accounts.uid_min "
            "(JAZZ_BRIDGE_ACCOUNTS__UID_MIN)"
        )

    def _candidates(self) -> Iterator[int]:
        """The range's uids in the order they are handed out: never used first (lowest
        first), then the freed ones, freed longest ago first."""
        lo, hi = self.uid_range
        freed = self._freed
        yield from (uid for uid in range(lo, hi + 1) if uid not in freed)
        yield from sorted(
            (uid for uid in freed if lo <= uid <= hi),
            key=lambda uid: (str(freed[uid].get("freedAt", "")), uid),
        )

    def _take_back(
        self, home: str, before: dict[str, Any], blocked: set[int], thread_key: str | None
    ) -> dict[str, Any] | None:
        """The entry giving archived ``home`` its old uid again, or None when it cannot."""
        lo, hi = self.uid_range
        uid, name = int(before["uid"]), str(before["name"])
        if uid in blocked or not lo <= uid <= hi:
            return None
        pw, group = _pw_by_uid(uid), _gr_by_gid(uid)
        if pw is not None and not (pw.pw_name == name and pw.pw_gecos.startswith(ACCOUNT_COMMENT)):
            return None  # another account's now (its own, not yet deleted, is fine)
        if group is not None and group.gr_name != name:
            return None
        if not self._clear_leftovers(uid, home):
            return None
        self._freed.pop(uid, None)
        named = _pw_by_name(name)
        if (named is not None and named.pw_uid != uid) or (
            named is None and name in self._taken_names()
        ):
            name = self._free_name(home, self._taken_names())
        return _new_entry(name, uid, thread_key)

    def _clear_leftovers(self, uid: int, home: str) -> bool:
        """Make freed ``uid`` fit to be ``home``'s (see the module docstring); False: it is
        not (logged), and another uid is taken."""
        record = self._freed.get(uid, {})
        gid = int(record.get("gid", uid))
        # a process of the uid now (made from a setuid file since, say) is killed before the
        # walk, so it writes nothing after it; and it may have left new files since the
        # uid's clearing (clearedAt): then the walk again
        running = leftovers.processes_of(uid, gid)
        problems = self._kill_uid(uid) if running else ""
        if not problems and record.get("home") != home:
            if record.get("clearedAt") and not running:
                report = leftovers.clear_ipc(uid, gid)  # costs nothing
            else:
                report = self._walk_leftovers(uid, gid, str(record.get("home", "?")), home)
            if not report.ok:
                problems = report.problems()
        if not problems:
            problems = self._kill_uid(uid)
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

    def _kill_uid(self, uid: int) -> str:
        """Kill every process of ``uid`` with the bridge's killer (none without one); what
        went wrong, or ""."""
        if self._kill is None:
            return ""
        try:
            self._kill([uid])
        except OSError as exc:
            return str(exc)
        return ""

    def _taken_names(self) -> set[str]:
        return {str(e["name"]) for e in self._accounts.values()}

    def _free_name(self, home: str, taken: set[str]) -> str:
        seed = f"{self.layout.root}\0{home}"
        for salt in range(1000):
            name = naming.account_name(seed, salt)
            if name in taken or _pw_by_name(name) or _gr_by_name(name):
                continue
            return name
        raise AccountError(f"no free account name for home {home}")

    def _materialize(self, home: str, entry: dict[str, Any]) -> None:
        """Make sure the account in ``entry`` exists in /etc/passwd with its uid."""
        name, uid = str(entry["name"]), int(entry["uid"])
        pw = _pw_by_name(name)
        if pw is not None:
            if pw.pw_uid != uid:
                raise AccountError(
                    f"account {name} of home {home} exists with uid {pw.pw_uid}, but the map "
                    f"{self.layout.uid_map} says {uid}; another account took the name: resolve "
                    "it by hand (userdel the stray account or edit the map)"
                )
            if pw.pw_gid == self.operator_gid:
                raise AccountError(
                    f"account {name} has the operator group as its primary group; refusing"
                )
            entry["gid"] = pw.pw_gid
            return
        other = _pw_by_uid(uid)
        if other is not None:
            raise UidTaken(
                f"uid {uid} of home {home} now belongs to account {other.pw_name}; it is never "
                "taken over: remove that account or move the home to another uid by hand"
            )
        group = _gr_by_name(name)
        if group is None:
            if _gr_by_gid(uid) is not None:
                raise UidTaken(
                    f"gid {uid} (the private group of {name}) belongs to group "
                    f"{_gr_by_gid(uid).gr_name}; refusing to share it"  # type: ignore[union-attr]
                )
            _run(["groupadd", "--gid", str(uid), name], taken=f"gid {uid} of home {home}")
            gid = uid
        else:
            gid = group.gr_gid
        try:
            _run(
                [
                    "useradd",
                    "--system",
                    "--uid",
                    str(uid),
                    "--gid",
                    str(gid),
                    "--no-create-home",
                    "--no-user-group",
                    "--no-log-init",
                    "--home-dir",
                    str(self.layout.home(home)),
                    "--shell",
                    _nologin(),
                    "--comment",
                    ACCOUNT_COMMENT,
                    name,
                ],
                taken=f"uid {uid} of home {home}",
            )
        except AccountError:  # UidTaken too: the group made for it goes with it
            if group is None:
                _remove_group(name, gid)
            raise
        entry["gid"] = gid
        log.info("created account %s (uid %d) for home %s", name, uid, home)

    def recreate_missing(self) -> list[Account]:
        """At start: recreate every mapped account that /etc/passwd lost. Returns those made."""
        made: list[Account] = []
        with self._locked():
            for home, entry in self._accounts.items():
                if _pw_by_name(str(entry["name"])) is None:
                    try:
                        self._materialize(home, entry)
                    except AccountError as exc:
                        log.error("%s", exc)
                        continue
                    made.append(_account(entry))
            if made:
                self._save()
        return made

    def archived(self, home: str) -> Account | None:
        """The account ``home`` had when it was archived and its account reclaimed."""
        with self._locked():
            entry = self._archived.get(home)
        return _account(entry) if entry else None

    def restored(self, home: str) -> None:
        """``home`` is back from its tarball with its live account: forget the old one."""
        with self._locked():
            if self._archived.pop(home, None) is not None:
                self._save()

    def reclaim(self, home: str) -> Account | None:
        """Give back the account of archived ``home``: the map first (the entry moves to
        ``archived``, its uid to ``freedUids``), then its processes killed, the account and
        its private group deleted. Returns the account, or None when it had none.

        The caller holds the home's archive lock exclusively and has seen the home
        archived (:mod:`provisioning.reclaim`). AccountError when the account could not be
        deleted: the map says it is archived already, and :meth:`finish_reclaims` deletes it.
        """
        with self._locked():
            entry = self._accounts.pop(home, None)
            if entry is None:
                return None
            account = _account(entry)
            self._archived[home] = {
                "name": account.name,
                "uid": account.uid,
                "gid": account.gid,
                "threadKey": entry.get("threadKey"),
                "archivedAt": _now(),
            }
            owner = _pw_by_uid(account.uid)
            if owner is None or owner.pw_name == account.name:  # not another account's uid
                self._freed[account.uid] = {"home": home, "gid": account.gid, "freedAt": _now()}
            self._save()
            self._delete_account(home, account)
            self._clear_freed(account.uid, home)
        log.info(
            "reclaimed account %s (uid %d) of archived home %s", account.name, account.uid, home
        )
        return account

    def _clear_freed(self, uid: int, home: str) -> None:
        """Delete what just-freed ``uid`` left outside ``home`` now, and note it in its
        ``freedUids`` record (see the module docstring). Under the map's lock, the account
        deleted. A clearing that fails is logged; the uid's allocation walks again."""
        record = self._freed.get(uid)
        if record is None:
            return  # another account's uid now: not ours to clear
        report = self._walk_leftovers(uid, int(record.get("gid", uid)), home, None)
        if not report.ok:
            log.warning(
                "what freed uid %d (last home %s) left outside its home could not all be "
                "deleted: %s; it is tried again before the uid serves another conversation",
                uid,
                home,
                report.problems(),
            )
            return
        record["clearedAt"] = _now()
        self._save()

    def _walk_leftovers(
        self, uid: int, gid: int, last_home: str, next_home: str | None
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

    def finish_reclaims(self) -> list[Account]:
        """Delete the accounts the map says are archived that still exist (a crash, or a
        kill that failed, between the map and ``userdel``). Returns those deleted; one that
        still cannot be is logged and kept for the next time."""
        done: list[Account] = []
        with self._locked():
            for home, entry in self._archived.items():
                if home in self._accounts:
                    continue  # restored meanwhile (the archived record is stale)
                account = _account(entry)
                pw = _pw_by_name(account.name)
                if (
                    pw is None
                    or pw.pw_uid != account.uid
                    or not pw.pw_gecos.startswith(ACCOUNT_COMMENT)
                ):
                    continue
                try:
                    self._delete_account(home, account)
                except AccountError as exc:
                    log.error("%s", exc)
                    continue
                if self._freed.get(account.uid, {}).get("home") == home:
                    self._clear_freed(account.uid, home)
                done.append(account)
        for account in done:
            log.warning(
                "deleted account %s (uid %d) of an archived home, left by an archiving cut off",
                account.name,
                account.uid,
            )
        return done

    def _delete_account(self, home: str, account: Account) -> None:
        """Kill the account's processes, then ``userdel`` it and ``groupdel`` its group."""
        pw = _pw_by_name(account.name)
        if pw is not None and pw.pw_uid == account.uid:
            if self._kill is not None:
                try:
                    self._kill([account.uid])
                except OSError as exc:
                    raise AccountError(
                        f"account {account.name} (uid {account.uid}) of archived home {home} "
                        f"is kept: its processes could not be killed ({exc}); the next start "
                        "or jazz-bridge repair tries again"
                    ) from exc
            else:
                pids = leftovers.processes_of(account.uid, account.gid)
                if pids:
                    raise AccountError(
                        f"account {account.name} (uid {account.uid}) of archived home {home} "
                        f"is kept: processes {pids[:5]} still run as it; stop them, then run "
                        "jazz-bridge repair"
                    )
            _run(["userdel", account.name])
        group = _gr_by_name(account.name)
        if group is not None and group.gr_gid == account.gid != self.operator_gid:
            _remove_group(account.name, account.gid)

    def remove(self, home: str) -> None:
        """Delete a conversation's account and forget it (tests)."""
        with self._locked():
            entry = self._accounts.pop(home, None)
            if entry is None:
                return
            name = str(entry["name"])
            pw = _pw_by_name(name)
            if pw is not None and pw.pw_uid == int(entry["uid"]):
                _run(["userdel", name])
            if _gr_by_name(name) is not None:
                subprocess.run(["groupdel", name], capture_output=True, check=False)
            self._freed[int(entry["uid"])] = {"home": home, "gid": _gid(entry), "freedAt": _now()}
            self._save()


def _entries(accounts: object) -> dict[str, dict[str, Any]]:
    """The well-formed entries of a map section (``accounts``, ``archived``)."""
    if not isinstance(accounts, dict):
        return {}
    return {
        str(home): dict(entry)
        for home, entry in accounts.items()
        if isinstance(entry, dict)
        and type(entry.get("uid")) is int  # not a bool (JSON true is no uid)
        and 0 < entry["uid"] <= UID_MAX
        and isinstance(entry.get("name"), str)
    }


def _new_entry(name: str, uid: int, thread_key: str | None) -> dict[str, Any]:
    return {"name": name, "uid": uid, "gid": uid, "threadKey": thread_key, "created": _now()}


def _gid(entry: dict[str, Any]) -> int:
    return int(entry.get("gid", entry["uid"]))


def _account(entry: dict[str, Any]) -> Account:
    return Account(str(entry["name"]), int(entry["uid"]), _gid(entry))


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def current_account() -> Account:
    """The gateway's own account (single-account mode)."""
    uid, gid = os.geteuid(), os.getegid()
    pw = _pw_by_uid(uid)
    return Account(pw.pw_name if pw else str(uid), uid, gid)


def map_path(layout: Layout) -> Path:
    return layout.uid_map


def _remove_group(name: str, gid: int) -> None:
    """Remove the private group just made for an account that could not be made.

    Two gateways (or a gateway and an admin) racing can both pass ``groupadd --gid`` with
    the same gid (the shadow tools check and write under separate steps): the other side's
    account then has that gid as its primary group, and ``groupdel`` refuses to remove a
    group named otherwise but sharing it. Forced only then, when another group of that gid
    stays for that account; otherwise a plain ``groupdel`` (never forced).
    """
    done = subprocess.run(["groupdel", name], capture_output=True, check=False)
    if done.returncode == 0:
        return
    if any(g.gr_gid == gid and g.gr_name != name for g in grp.getgrall()):
        subprocess.run(["groupdel", "--force", name], capture_output=True, check=False)
