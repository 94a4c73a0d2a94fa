"""One lock per home, so archiving it never races its restore, its building or a run in it.

Split out of :mod:`provisioning.archive` because more than the archive takes it:
archiving and restoring hold it exclusively (and so does finishing a reclaim a crash cut
off, :mod:`provisioning.reclaim`), :meth:`Homes.ensure` and :meth:`Homes.present` shared.
Per home, not one for the root: packing a big home takes minutes, and every other
conversation's next message must still get its home meanwhile. The lock files live in
``state/home-locks/<home>``, not in ``archive/``, which holds tarballs only; one empty file
per home, never removed, since removing a lock file another process may have open is a
race.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager

from . import pinned
from .layout import RootInfo
from .modes import LOCKS_DIR_MODE, STATE_FILE_MODE

LOCKS_DIR = "home-locks"  # in <root>/state: one lock file per home (see the module docstring)


def _locks_dir(root: RootInfo) -> int:
    """Open (creating or repairing) ``<root>/state/home-locks``: 2750 gateway:O."""
    with pinned.opened_dir(root.layout.state) as state_fd:
        return pinned.ensure_dir(state_fd, LOCKS_DIR, LOCKS_DIR_MODE, None, root.operator_gid)


@contextmanager
def home_lock(root: RootInfo, name: str, *, exclusive: bool, wait: bool = True) -> Iterator[None]:
    """Hold home ``name``'s lock: exclusive to archive or restore it, shared to build it or
    start a run in it. Homes other than ``name`` are not held up. With ``wait=False`` a lock
    held the other way raises :class:`BlockingIOError` at once instead of waiting."""
    lock_name = root.layout.home(name).name  # refuses a name that is not a home's
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:  # state/ is the gateway's own (2750): no conversation can plant a link in it
        fd = os.open(root.layout.state / LOCKS_DIR / lock_name, flags, STATE_FILE_MODE)
    except FileNotFoundError:  # the first lock taken on this root
        dir_fd = _locks_dir(root)
        try:
            fd = os.open(lock_name, flags, STATE_FILE_MODE, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
    try:
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        fcntl.flock(fd, mode if wait else mode | fcntl.LOCK_NB)
        yield
    finally:
        os.close(fd)
