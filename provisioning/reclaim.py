"""Archived conversations give their Unix accounts back; restored ones get one again.

Without this every conversation ever started kept its uid, and a range ran out however
few conversations were live. Archiving (:func:`archive_and_reclaim`) now ends with the
account's reclaim, under the home's archive lock once the tarball is whole and the
directory gone: :meth:`AccountRegistry.reclaim` kills the account's processes, deletes it
and its private group, and the uid map remembers who the conversation was. A restore
(:func:`restore_owner`, asked by :meth:`Homes.ensure` under the same lock) makes the
conversation an account again, its old uid when it is still free, and its files follow.

The lock is what keeps the two apart: a home is reclaimed only while it is archived and
its lock held exclusively, and it is built (and its runs started) only while it is not
archived and its lock held shared, so no run ever starts under an account being deleted.

Crash safety: :func:`repair_reclaims` (every start and ``jazz-bridge repair``) reclaims the
accounts of homes found archived (a crash after the tarball's rename, before the map was
written) and deletes those the map says are reclaimed but ``/etc/passwd`` still has (a
crash, or a kill that failed, before ``userdel``). Without isolation there are no
accounts and nothing here runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from . import archive
from .accounts import AccountRegistry
from .archive import ArchiveResult
from .archive_lock import home_lock
from .archive_restore import Reowning
from .errors import AccountError, StateFileError
from .layout import RootInfo

log = logging.getLogger(__name__)


def archive_and_reclaim(
    root: RootInfo,
    name: str,
    registry: AccountRegistry | None,
    check: Callable[[], None] | None = None,
) -> ArchiveResult:
    """:func:`~provisioning.archive.archive_home`, then the account's reclaim (isolated:
    ``registry``; None archives only). Blocking. A reclaim that fails is logged: the home is
    archived all the same, and the next start or ``jazz-bridge repair`` finishes it."""
    if registry is None:
        return archive.archive_home(root, name, check)
    return archive.archive_home(root, name, check, after=lambda: _reclaim(registry, name))


def _reclaim(registry: AccountRegistry, name: str) -> None:
    try:
        registry.reclaim(name)
    except (AccountError, StateFileError) as exc:
        log.error(
            "archived home %s, but its account was not given back: %s (the next start or "
            "jazz-bridge repair tries again)",
            name,
            exc,
        )


def restore_owner(
    registry: AccountRegistry, name: str, thread_key: str | None
) -> Callable[[], Reowning | None]:
    """What :func:`~provisioning.archive.restore_home` asks, under the home's lock, whose
    the restored files become: the account ``name`` has (made now if it was reclaimed)."""

    def owner() -> Reowning | None:
        account = registry.ensure(name, thread_key)
        before = registry.archived(name)
        if before is None or (before.uid, before.gid) == (account.uid, account.gid):
            return None
        if before.uid != account.uid:
            log.info(
                "home %s comes back as uid %d (its uid %d is another's now): its files are "
                "given to the new account",
                name,
                account.uid,
                before.uid,
            )
        return Reowning(before.uid, before.gid, account.uid, account.gid)

    return owner


def repair_reclaims(root: RootInfo, registry: AccountRegistry) -> int:
    """Finish the reclaims a crash cut off (see the module docstring); how many. Blocking."""
    done = 0
    for name in sorted(registry.all()):
        if not archive.is_archived(root.layout, name):
            continue
        with home_lock(root, name, exclusive=True):
            if not archive.is_archived(root.layout, name):
                continue  # restored meanwhile
            try:
                if registry.reclaim(name) is not None:
                    done += 1
                    log.warning("reclaimed the account of archived home %s, left by a crash", name)
            except AccountError as exc:
                log.error("%s", exc)
    done += len(registry.finish_reclaims())
    return done
