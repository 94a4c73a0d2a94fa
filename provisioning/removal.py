"""Removing a conversation's home and account for good (``jazz-bridge homes remove``).

Archiving (:mod:`provisioning.archive`) keeps a home to come back at the conversation's
next message; a removed one does not come back. Its home is packed as an archiving packs
it and the tarball renamed out of the way (``archive/<home>.removed-<UTC>.tar.gz``, which
no restore looks for), or, with ``delete``, the directory is deleted; then its account
and private group are deleted (:meth:`AccountRegistry.reclaim`, which kills what still
runs as it). All under the home's lock held exclusively, after the caller's ``check`` (is
a run in progress?), so no run starts in it meanwhile. A next message for the same thread
builds a fresh home with a new account.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .accounts import AccountRegistry
from .archive import SUFFIX, archive_home, tarball_path
from .archive_cleanup import remove_crashed_deletes
from .archive_lock import home_lock
from .archive_write import remove_packed
from .errors import ArchiveError
from .layout import Layout, RootInfo
from .safefs import fsync_dir
from .system_accounts import Account

log = logging.getLogger(__name__)

REMOVED_INFIX = ".removed-"  # archive/<home>.removed-<UTC>.tar.gz: never restored


@dataclass(frozen=True)
class Removal:
    """What removing one home did."""

    home: str
    tarball: Path | None  # where its files are kept; None when deleted (or it had none)
    deleted: bool  # its directory (or its earlier archive) was deleted
    account: Account | None  # the account deleted, None when it had none (or not isolated)

    def as_dict(self) -> dict[str, object]:
        return {
            "home": self.home,
            "tarball": None if self.tarball is None else str(self.tarball),
            "deleted": self.deleted,
            "account": None if self.account is None else self.account.name,
            "uid": None if self.account is None else self.account.uid,
        }


def removed_tarball_path(layout: Layout, name: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    layout.home(name)  # refuses a name that is not a plain home directory name
    return layout.archive / f"{name}{REMOVED_INFIX}{stamp}{SUFFIX}"


def _set_aside(layout: Layout, name: str) -> Path:
    """Rename the home's tarball where no restore looks; the caller holds the lock."""
    target = removed_tarball_path(layout, name)
    os.rename(tarball_path(layout, name), target)
    fsync_dir(layout.archive)
    return target


def remove_home(
    root: RootInfo,
    name: str,
    registry: AccountRegistry | None,
    check: Callable[[], None] | None = None,
    *,
    delete: bool = False,
) -> Removal:
    """Remove home ``name`` and its account (module docstring). Blocking. ``check`` runs
    under the home's lock before anything is touched and raises to refuse."""
    layout = root.layout
    home = layout.home(name)
    kept: Path | None = None
    account: Account | None = None

    def drop_account() -> None:
        nonlocal account
        if registry is not None:
            account = registry.reclaim(name)

    try:
        st: os.stat_result | None = os.lstat(home)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise ArchiveError(f"{home} is a link or not a directory; refusing to remove it")
    if st is not None and not delete:

        def after() -> None:  # under the lock: the tarball whole, the directory gone
            nonlocal kept
            kept = _set_aside(layout, name)
            drop_account()

        archive_home(root, name, check, after=after)
        log.info("removed home %s: its files are kept in %s", name, kept)
        return Removal(name, kept, False, account)
    deleted = False
    with home_lock(root, name, exclusive=True):
        if check is not None:
            check()
        if os.path.lexists(home):
            if not os.path.isdir(home) or os.path.islink(home):
                raise ArchiveError(f"{home} is a link or not a directory; refusing to remove it")
            remove_crashed_deletes(layout, name)
            remove_packed(layout, name, home)  # one rename out of chats/, then deleted
            deleted = True
        elif tarball_path(layout, name).exists():  # archived before: its tarball goes too
            if delete:
                os.unlink(tarball_path(layout, name))
                fsync_dir(layout.archive)
                deleted = True
            else:
                kept = _set_aside(layout, name)
        drop_account()
    log.info("removed home %s (%s)", name, "deleted" if deleted else f"kept in {kept}")
    return Removal(name, kept, deleted, account)
