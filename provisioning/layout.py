"""The shared root: its paths, and creating or repairing it (``jazz-bridge init``).

The root is the one place every conversation home hangs from. Its modes are what make
"operators read everything, conversations read only their own" true, so it is created
with exact modes and owners and refused, with a fix, when it is not something the gateway
may safely use (a link, a directory of another account).
"""

from __future__ import annotations

import grp
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from . import pinned
from .errors import LayoutError, OperatorGroupError, UnsafePathError
from .modes import (
    ARCHIVE_DIR_MODE,
    CHATS_MODE,
    PERSONAS_MODE,
    ROOT_MODE,
    STATE_DIR_MODE,
    TOOLS_DIR_MODE,
)

log = logging.getLogger(__name__)

CHATS_DIR = "chats"
PERSONAS_DIR = "personas"
STATE_DIR = "state"
ARCHIVE_DIR = "archive"
TOOLS_DIR = "tools"


@dataclass(frozen=True)
class Layout:
    """Where things live under one root."""

    root: Path

    @property
    def chats(self) -> Path:
        return self.root / CHATS_DIR

    @property
    def personas(self) -> Path:
        return self.root / PERSONAS_DIR

    @property
    def state(self) -> Path:
        return self.root / STATE_DIR

    @property
    def archive(self) -> Path:
        return self.root / ARCHIVE_DIR

    @property
    def tools(self) -> Path:
        return self.root / TOOLS_DIR

    @property
    def uid_map(self) -> Path:
        return self.state / "accounts.json"

    @property
    def database(self) -> Path:
        return self.state / "bridge.db"

    def home(self, name: str) -> Path:
        if "/" in name or name in ("", ".", ".."):
            raise LayoutError(f"{name!r} is not a home directory name")
        return self.chats / name


@dataclass(frozen=True)
class RootInfo:
    layout: Layout
    operator_gid: int
    operator_group: str
    owner_uid: int


def resolve_operator_group(name: str | None, root: Path) -> tuple[int, str]:
    """The operator group: the one named, else the root's group, else our primary group."""
    if name:
        try:
            entry = grp.getgrnam(name)
        except KeyError:
            raise OperatorGroupError(
                f"operator group {name!r} does not exist on this host; create it "
                f"(groupadd {name}) or set operator_group to an existing group"
            ) from None
        return entry.gr_gid, entry.gr_name
    try:
        gid = os.lstat(root).st_gid
    except FileNotFoundError:
        gid = os.getegid()
    try:
        return gid, grp.getgrgid(gid).gr_name
    except KeyError:
        return gid, str(gid)


def untraversable_ancestor(path: Path) -> Path | None:
    """The first ancestor of ``path`` that other accounts cannot traverse (o-x), if any.

    Conversation accounts reach their homes through every ancestor of the root: a root
    under ``/root`` (0700) cannot work with isolation.
    """
    for parent in Path(os.path.abspath(path)).parents:
        try:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return parent
        except OSError:
            return parent
    return None


def _check_root(root: Path) -> None:
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise LayoutError(
            f"root {root} is a symbolic link; point root at the real directory "
            f"({os.path.realpath(root)}) instead"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise LayoutError(f"root {root} exists and is not a directory; remove it or pick another")
    if st.st_uid != os.geteuid():
        raise LayoutError(
            f"root {root} is owned by uid {st.st_uid}, not by the gateway's account (uid "
            f"{os.geteuid()}); chown it to the gateway's account or use another root"
        )


def init_root(root: Path, operator_group: str | None = None) -> RootInfo:
    """Create or repair the shared root. Idempotent."""
    root = Path(os.path.abspath(root))
    _check_root(root)
    gid, group_name = resolve_operator_group(operator_group, root)
    uid = os.geteuid()
    if uid != 0 and gid not in os.getgroups() and gid != os.getegid():
        raise OperatorGroupError(
            f"the gateway's account is not a member of operator group {group_name!r}, so it "
            f"cannot give {root} to it; add it (usermod -aG {group_name} $USER) or run as root"
        )
    root.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(root, 0o750)
    except FileExistsError:
        pass
    _check_root(root)
    fd = pinned.open_dir(root)
    try:
        pinned.set_owner_and_mode(fd, ROOT_MODE, uid, gid)
        for name, mode in (
            (CHATS_DIR, CHATS_MODE),
            (PERSONAS_DIR, PERSONAS_MODE),
            (STATE_DIR, STATE_DIR_MODE),
            (ARCHIVE_DIR, ARCHIVE_DIR_MODE),
            (TOOLS_DIR, TOOLS_DIR_MODE),
        ):
            try:
                child = pinned.ensure_dir(fd, name, mode, uid, gid)
            except UnsafePathError as exc:
                raise LayoutError(
                    f"{root / name} is a symbolic link or not a directory; remove it and run "
                    "jazz-bridge init again"
                ) from exc
            os.close(child)
    finally:
        os.close(fd)
    return RootInfo(Layout(root), gid, group_name, uid)
