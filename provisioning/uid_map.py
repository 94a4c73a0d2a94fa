"""The conversation -> uid map of one root: its state file, its lock, its rebuild from disk.

Split out of :mod:`provisioning.accounts` (the registry, which decides what goes into the
map): this module keeps it. The map (``state/accounts.json``) has three sections:
``accounts``, the live conversations' accounts (home -> name, uid, gid); ``archived``, who
an archived conversation's reclaimed account was; ``freedUids``, whose each given-back uid
was last and since when. It is read
afresh under its lock (:meth:`UidMap.locked`: an in-process lock plus a file lock, so a CLI
and a running gateway never race) and written atomically (:meth:`UidMap.save`).

An unreadable map is moved aside (:func:`provisioning.safefs.read_json_state`) and rebuilt
from the owners of the homes on disk, the conversation accounts ``/etc/passwd`` still names,
and the owners of the archived homes' tarballs; a rebuilt map's archived uids are freed
ones of unknown history, so their leftovers are walked at their allocation. Hand-edited
entries that are malformed are dropped, except a live account's bad gid, which stops the
command with the entry named (:meth:`UidMap._check_gid`).
"""

from __future__ import annotations

import fcntl
import logging
import os
import pwd
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import archive, naming, safefs
from .errors import StateFileError
from .layout import Layout
from .system_accounts import ACCOUNT_COMMENT, Account, free_name, pw_by_uid

log = logging.getLogger("provisioning.accounts")  # the registry's log, as before the split

MAP_SCHEMA = 1
UID_MAX = 2**31 - 2  # above: (uid_t)-1 and friends, never an account's uid in the map

Entries = dict[str, dict[str, Any]]  # home -> its entry (name, uid, gid, ...)


class UidMap:
    """The map of one root, as last read under :meth:`locked` (and changed since)."""

    def __init__(self, layout: Layout, uid_range: tuple[int, int]) -> None:
        self.layout = layout
        self.uid_range = uid_range
        self._lock = threading.Lock()
        self.accounts: Entries = {}  # live: home -> account
        self.archived: Entries = {}  # home -> the account it had
        self.freed: dict[int, dict[str, Any]] = {}  # uid -> its last holder, since when

    @contextmanager
    def locked(self) -> Iterator[None]:
        """In-process lock plus a file lock, so a CLI and a running gateway never race."""
        with self._lock:
            lock_path = self.layout.state / "accounts.lock"
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                self.reload()
                yield
            finally:
                os.close(fd)

    def reload(self) -> None:
        """Read the map; a missing or unreadable one (moved aside) is rebuilt from disk."""
        document = safefs.read_json_state(self.layout.uid_map, MAP_SCHEMA)
        if document is None:
            self.accounts, self.archived = self._rebuild_from_disk()
            self.freed = {
                int(e["uid"]): {
                    "home": home,
                    "gid": entry_gid(e),
                    "freedAt": now(),
                    "rebuilt": True,
                }
                for home, e in self.archived.items()
                if int(e["uid"]) not in {int(a["uid"]) for a in self.accounts.values()}
            }
            if self.accounts or self.archived:
                self.save()
            return
        self.accounts = entries(document.get("accounts", {}))
        for home, entry in self.accounts.items():
            self._check_gid(home, entry)
        self.archived = {
            home: entry
            for home, entry in entries(document.get("archived", {})).items()
            if type(entry.get("gid", entry["uid"])) is int
        }
        freed = document.get("freedUids", {})
        self.freed = {
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

    def save(self) -> None:
        safefs.atomic_write_json(
            self.layout.uid_map,
            {
                safefs.SCHEMA_KEY: MAP_SCHEMA,
                "root": str(self.layout.root),
                "uidRange": list(self.uid_range),
                "accounts": self.accounts,
                "archived": self.archived,
                "freedUids": {str(uid): record for uid, record in sorted(self.freed.items())},
            },
        )

    def home_owners(self) -> dict[int, str]:
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

    def _rebuild_from_disk(self) -> tuple[Entries, Entries]:
        """Recover the map from who owns which home; only uids inside our range count.

        Returns the live accounts and the archived conversations: a tarball whose home has no
        account (it was reclaimed) names the uid its home had (its first member's owner)."""
        lo, hi = self.uid_range
        rebuilt: dict[str, dict[str, Any]] = {}
        for uid, home in self.home_owners().items():
            if not lo <= uid <= hi:
                continue
            pw = pw_by_uid(uid)
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
            name = pw.pw_name if pw else free_name(self.layout, home, taken=set())
            rebuilt[home] = {
                "name": name,
                "uid": uid,
                "gid": pw.pw_gid if pw else uid,
                "created": now(),
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
                    "created": now(),
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
            name = free_name(self.layout, home, taken)
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

    def taken_names(self) -> set[str]:
        return {str(e["name"]) for e in self.accounts.values()}


def entries(accounts: object) -> dict[str, dict[str, Any]]:
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


def new_entry(name: str, uid: int, thread_key: str | None) -> dict[str, Any]:
    return {"name": name, "uid": uid, "gid": uid, "threadKey": thread_key, "created": now()}


def entry_gid(entry: dict[str, Any]) -> int:
    return int(entry.get("gid", entry["uid"]))


def to_account(entry: dict[str, Any]) -> Account:
    return Account(str(entry["name"]), int(entry["uid"]), entry_gid(entry))


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
