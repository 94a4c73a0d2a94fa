"""One Unix account per conversation, and the map that remembers which is whose.

With root and isolation on, each conversation runs under its own system account (nologin,
no home made by useradd, a private primary group that is never the operator group), so
"other" bits mean nothing is readable across conversations while the operator group reads
every home. The conversation -> uid map is a state file under the root's ``state/``:

* accounts missing from ``/etc/passwd`` (a rebuilt container) are recreated from it;
* an unreadable map is moved aside and rebuilt from the owners of the homes on disk;
* a uid that owns a home is never handed to another conversation, and a uid or name that
  some other account on the host already has is never taken over.
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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import archive, naming, safefs
from .errors import AccountError, StateFileError, UidRangeExhausted, UidTaken
from .layout import Layout

log = logging.getLogger(__name__)

MAP_SCHEMA = 1
DEFAULT_UID_RANGE = (70000, 79999)
NOLOGIN_CANDIDATES = ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false")
ACCOUNT_COMMENT = "jazz-bridge conversation"
UID_MAX = 2**31 - 2  # above: (uid_t)-1 and friends, never an account's uid in the map
MAX_ALLOCATIONS = 3  # uids tried for a new home whose uid another account took meanwhile


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
    ) -> None:
        lo, hi = uid_range
        if not (1000 <= lo <= hi < 2**31 - 1):
            raise AccountError(f"uid range {lo}-{hi} is not a usable range of system uids")
        self.layout = layout
        self.operator_gid = operator_gid
        self.uid_range = uid_range
        self._lock = threading.Lock()
        self._accounts: dict[str, dict[str, Any]] = {}

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
            self._accounts = self._rebuild_from_disk()
            if self._accounts:
                self._save()
            return
        accounts = document.get("accounts", {})
        self._accounts = {
            str(home): dict(entry)
            for home, entry in (accounts.items() if isinstance(accounts, dict) else [])
            if isinstance(entry, dict)
            and type(entry.get("uid")) is int  # not a bool (JSON true is no uid)
            and 0 < entry["uid"] <= UID_MAX
            and isinstance(entry.get("name"), str)
        }
        for home, entry in self._accounts.items():
            self._check_gid(home, entry)

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

    def _rebuild_from_disk(self) -> dict[str, dict[str, Any]]:
        """Recover the map from who owns which home; only uids inside our range count."""
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
        if rebuilt:
            log.warning(
                "rebuilt the account map %s from %d home(s) on disk",
                self.layout.uid_map,
                len(rebuilt),
            )
        return rebuilt

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
        """How many uids of the range conversation accounts hold, and how many it has.

        Accounts are kept (an archived conversation keeps its uid), so a range fills up:
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
                    has_files = os.path.lexists(self.layout.home(home)) or (
                        archive.tarball_path(self.layout, home).exists()
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
                return {
                    "name": name,
                    "uid": uid,
                    "gid": uid,
                    "threadKey": thread_key,
                    "created": _now(),
                }
        blocked = used | set(owners)
        for uid in range(lo, hi + 1):
            if uid in blocked or _pw_by_uid(uid) is not None or _gr_by_gid(uid) is not None:
                continue
            if uid == self.operator_gid:
                continue
            name = self._free_name(home, self._taken_names())
            return {
                "name": name,
                "uid": uid,
                "gid": uid,
                "threadKey": thread_key,
                "created": _now(),
            }
        raise UidRangeExhausted(
            f"every uid in {lo}-{hi} is taken by a conversation or another account (an "
            "archived conversation keeps its uid); widen the range into uids no other account "
            "on this host uses: raise accounts.uid_max (JAZZ_BRIDGE_ACCOUNTS__UID_MAX) or "
            "lower accounts.uid_min (JAZZ_BRIDGE_ACCOUNTS__UID_MIN)"
        )

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

    def remove(self, home: str) -> None:
        """Delete a conversation's account and forget it (archive, tests)."""
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
            self._save()


def _account(entry: dict[str, Any]) -> Account:
    return Account(str(entry["name"]), int(entry["uid"]), int(entry.get("gid", entry["uid"])))


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
