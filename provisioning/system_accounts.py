"""The host's side of conversation accounts: ``useradd``/``groupadd``/``userdel`` and lookups.

Split out of :mod:`provisioning.accounts` (the registry that decides which account a
conversation has): this module only talks to the system. It makes an account the way
every conversation account is made (a system account, nologin, no home made by useradd,
a private primary group that is never the operator group, :data:`ACCOUNT_COMMENT` as its
comment, by which a conversation's account is told from any other), deletes one once its
processes are gone, and looks names and ids up in ``/etc/passwd`` and ``/etc/group``. The
shadow-utils commands are the only check that cannot race another gateway or an admin
picking the same id (:func:`run`); a name or id some other account has is never taken over.
"""

from __future__ import annotations

import grp
import logging
import os
import pwd
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from . import leftovers, naming
from .errors import AccountError, UidTaken
from .layout import Layout

log = logging.getLogger("provisioning.accounts")  # the registry's log, as before the split

NOLOGIN_CANDIDATES = ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false")
ACCOUNT_COMMENT = "jazz-bridge conversation"

Killer = Callable[[Iterable[int]], None]  # SIGKILLs every process of these uids, or raises


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int


def nologin() -> str:
    for candidate in NOLOGIN_CANDIDATES:
        if os.path.exists(candidate):
            return candidate
    return "/bin/false"


LOCK_RETRIES = 10  # useradd/groupadd finding /etc/passwd or /etc/group locked by another tool


NOT_UNIQUE_EXIT = 4  # useradd: "UID already in use"; groupadd: "GID is already used"


def run(argv: list[str], *, taken: str | None = None) -> None:
    """Run a shadow-utils command; AccountError when it fails.

    ``taken`` describes the uid/gid asked for: when the command says another account or
    group got it first (exit 4) that is :class:`UidTaken`, which
    :meth:`provisioning.accounts.AccountRegistry.ensure` answers with another uid. The check
    before the command cannot see another gateway on this host (another root, its own map
    lock) or an admin picking the same free id in the same instant; the command itself is
    the only check that cannot race.
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


def pw_by_name(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def pw_by_uid(uid: int) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwuid(uid)
    except KeyError:
        return None


def gr_by_name(name: str) -> grp.struct_group | None:
    try:
        return grp.getgrnam(name)
    except KeyError:
        return None


def gr_by_gid(gid: int) -> grp.struct_group | None:
    try:
        return grp.getgrgid(gid)
    except KeyError:
        return None


def free_name(layout: Layout, home: str, taken: set[str]) -> str:
    """An account name for ``home`` that is not in ``taken`` and no account or group has."""
    seed = f"{layout.root}\0{home}"
    for salt in range(1000):
        name = naming.account_name(seed, salt)
        if name in taken or pw_by_name(name) or gr_by_name(name):
            continue
        return name
    raise AccountError(f"no free account name for home {home}")


def materialize(layout: Layout, operator_gid: int, home: str, entry: dict[str, Any]) -> None:
    """Make sure the account in ``entry`` exists in /etc/passwd with its uid."""
    name, uid = str(entry["name"]), int(entry["uid"])
    pw = pw_by_name(name)
    if pw is not None:
        if pw.pw_uid != uid:
            raise AccountError(
                f"account {name} of home {home} exists with uid {pw.pw_uid}, but the map "
                f"{layout.uid_map} says {uid}; another account took the name: resolve "
                "it by hand (userdel the stray account or edit the map)"
            )
        if pw.pw_gid == operator_gid:
            raise AccountError(
                f"account {name} has the operator group as its primary group; refusing"
            )
        entry["gid"] = pw.pw_gid
        return
    other = pw_by_uid(uid)
    if other is not None:
        raise UidTaken(
            f"uid {uid} of home {home} now belongs to account {other.pw_name}; it is never "
            "taken over: remove that account or move the home to another uid by hand"
        )
    group = gr_by_name(name)
    if group is None:
        if gr_by_gid(uid) is not None:
            raise UidTaken(
                f"gid {uid} (the private group of {name}) belongs to group "
                f"{gr_by_gid(uid).gr_name}; refusing to share it"  # type: ignore[union-attr]
            )
        run(["groupadd", "--gid", str(uid), name], taken=f"gid {uid} of home {home}")
        gid = uid
    else:
        gid = group.gr_gid
    try:
        run(
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
                str(layout.home(home)),
                "--shell",
                nologin(),
                "--comment",
                ACCOUNT_COMMENT,
                name,
            ],
            taken=f"uid {uid} of home {home}",
        )
    except AccountError:  # UidTaken too: the group made for it goes with it
        if group is None:
            remove_group(name, gid)
        raise
    entry["gid"] = gid
    log.info("created account %s (uid %d) for home %s", name, uid, home)


def delete_account(home: str, account: Account, operator_gid: int, kill: Killer | None) -> None:
    """Kill the account's processes, then ``userdel`` it and ``groupdel`` its group."""
    pw = pw_by_name(account.name)
    if pw is not None and pw.pw_uid == account.uid:
        if kill is not None:
            try:
                kill([account.uid])
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
        run(["userdel", account.name])
    group = gr_by_name(account.name)
    if group is not None and group.gr_gid == account.gid != operator_gid:
        remove_group(account.name, account.gid)


def remove_group(name: str, gid: int) -> None:
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
