"""What archivings and restores cut off by a crash leave behind, found and removed.

Split out of :mod:`provisioning.archive`, whose steps leave only these behind when a crash
(or Ctrl-C) cuts them off: a half-written tarball (``archive/.<home>.XXXXXXXX.tmp``, as big
as the home, never used), a restore's staging directory (``chats/.restore-<home>.XXXXXXXX``,
a partial copy of the home) and a packed home being deleted (``chats/.archived-<home>.
XXXXXXXX``, whose tarball was whole before it was moved there). Nothing else would ever
remove them; the next archiving or restore of that home does, under the home's lock, so
none of them is in use. Another home's (whose name may start with this one's) has a
longer name than :data:`STAGING_SUFFIX_CHARS` after the prefix.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

from .layout import Layout

log = logging.getLogger("provisioning.archive")  # the archive's log, as before the split

STAGING_SUFFIX_CHARS = 8  # what tempfile.mkdtemp/mkstemp put after a staging prefix
TMP_SUFFIX = ".tmp"  # a tarball being written (archive/.<name>.XXXXXXXX.tmp)


def remove_crashed_archives(layout: Layout, name: str) -> None:
    """Delete the half-written tarballs of ``name`` that archivings cut off by a crash left
    in ``archive/`` (as big as the home, never used). The caller holds the home's lock;
    another home's (whose name may start with this one's) has a longer name."""
    prefix = f".{name}."
    for entry in os.listdir(layout.archive):
        rest = entry[len(prefix) : -len(TMP_SUFFIX)]
        if not (entry.startswith(prefix) and entry.endswith(TMP_SUFFIX)):
            continue
        if len(rest) != STAGING_SUFFIX_CHARS:
            continue
        log.warning("archiving %s: removing %s, left by an archiving cut off", name, entry)
        with quiet():
            os.unlink(layout.archive / entry)


def staging_prefix(name: str) -> str:
    return f".restore-{name}."


def trash_prefix(name: str) -> str:
    return f".archived-{name}."


def remove_crashed_restores(layout: Layout, name: str) -> None:
    """Delete what restores of ``name`` cut off by a crash left: their staging directories,
    partial copies of the home nothing else would ever remove. The caller holds the home's
    lock, so none of them is in use; another home's (whose name may start with this one's)
    has a longer name than :data:`STAGING_SUFFIX_CHARS` after the prefix."""
    _remove_leftovers(layout, staging_prefix(name), f"restoring {name}", "a restore cut off")


def remove_crashed_deletes(layout: Layout, name: str) -> None:
    """Delete the packed copies of ``name`` that archivings cut off while deleting them
    (Ctrl-C, a crash) left hidden in ``chats/`` (see
    :func:`provisioning.archive_write.remove_packed`): their tarball was whole before the
    home was moved there. The caller holds the home's lock."""
    _remove_leftovers(layout, trash_prefix(name), name, "an archiving cut off")


def _remove_leftovers(layout: Layout, prefix: str, what: str, cause: str) -> None:
    for entry in os.listdir(layout.chats):
        rest = entry[len(prefix) :]
        if not entry.startswith(prefix) or len(rest) != STAGING_SUFFIX_CHARS:
            continue
        log.warning("%s: removing %s, left by %s", what, entry, cause)
        shutil.rmtree(layout.chats / entry, ignore_errors=True)  # fd-based: follows no link


@contextmanager
def quiet() -> Iterator[None]:
    """Ignore a file already gone (what is being removed)."""
    try:
        yield
    except FileNotFoundError:
        pass
