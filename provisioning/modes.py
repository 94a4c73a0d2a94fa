"""The exact modes of the on-disk layout (docs/design.md "On disk"), named once with their bits.

Everything that creates or repairs a directory takes its mode from here, so the table in
docs/design.md and the code can be compared line by line.
"""

from __future__ import annotations

import stat

# Shared root and its children.
ROOT_MODE = 0o2751  # rwxr-s--x  setgid operator group; others may only traverse
CHATS_MODE = 0o2751  # rwxr-s--x  traversable, not listable
PERSONAS_MODE = 0o0755  # rwxr-xr-x  shared read-only personas
STATE_DIR_MODE = 0o2750  # rwxr-s---  the gateway's own stores: never world-readable
STATE_FILE_MODE = 0o0640  # rw-r-----
ARCHIVE_DIR_MODE = 0o2750  # rwxr-s---
LOCKS_DIR_MODE = 0o2750  # rwxr-s---  state/home-locks: the per-home archive locks
# state/web-uploads: a web chat upload between its message's 202 and its turn, which saves
# it into the home as every platform's attachment is; the gateway's alone meanwhile
STAGED_UPLOADS_DIR_MODE = 0o0700  # rwx------
STAGED_UPLOAD_FILE_MODE = 0o0600  # rw-------
TOOLS_DIR_MODE = 0o0755  # rwxr-xr-x  shared runner tools (the reference runner), read-only

# One conversation's home when it has its own account (isolated).
HOME_MODE = 0o2750  # rwxr-s---  conv:O, files land conv:O 0640
HOME_SUBDIR_MODE = 0o2750  # rwxr-s---
GNUPG_MODE = 0o0700  # rwx------  conv:conv, gpg refuses anything looser
CONFIG_FILE_MODE = 0o0600  # rw-------

# A home when every conversation runs as the gateway's own account (no root / isolation off).
PRIVATE_DIR_MODE = 0o0700  # rwx------
PRIVATE_FILE_MODE = 0o0600  # rw-------

# umask of a runner process.
ISOLATED_UMASK = 0o027  # group may read, others nothing
PRIVATE_UMASK = 0o077  # only the owner

OTHER_BITS = stat.S_IRWXO  # ------rwx
GROUP_BITS = stat.S_IRWXG  # ---rwx---
SPECIAL_EXEC_BITS = stat.S_ISUID | stat.S_ISGID  # setuid/setgid, stripped from regular files

# A home made single-account handed over to its conversation's new account (handover.py):
# the setgid-home rule on what changes hands (owner's and group's bits kept, never widened).
HANDOVER_FILE_DROP = OTHER_BITS | SPECIAL_EXEC_BITS  # 06007  ss-------rwx  (file: conv:O)
HANDOVER_DIR_DROP = OTHER_BITS  # 00007  ------rwx  (directory: conv:O)
HANDOVER_DIR_ADD = stat.S_ISGID  # 02000  setgid, as in any isolated home: files land conv:O
# Jazz's own records, which operators read for support: in these top-level directories of a
# handed-over home the group also gets the owner's read and search bits, as the runs'
# isolated umask (027) would have left them. Made under the single-account umask (077),
# they were owner-only by the umask, not by choice. Elsewhere (workspace, gnupg, XDG dirs,
# password-store) a 0600 may be a program's own (an SSH key): never widened there.
HANDOVER_GROUP_READABLE = frozenset({"history", "memory", "agents"})
OWNER_READ_SEARCH = stat.S_IRUSR | stat.S_IXUSR  # 00500  r-x------, copied to the group


def group_reads_like_owner(mode: int) -> int:
    """``mode`` with the group's read and search bits set where the owner has them
    (``0600`` -> ``0640``, ``0700`` -> ``0750``); write is never given."""
    return mode | ((mode & OWNER_READ_SEARCH) >> 3)


# The directories every home has, besides gnupg and the personas link.
HOME_SUBDIRS: tuple[str, ...] = (
    "agents",
    "history",
    "memory",
    "workspace",
    "tmp",
    "xdg-config",
    "xdg-data",
    "xdg-state",
    "xdg-cache",
    "password-store",
)
GNUPG_DIR = "gnupg"
PERSONAS_LINK = "personas"
CONFIG_FILE = "config.json"
REPAIR_MARKER = ".permissions-repaired"
HANDOVER_MARKER = ".handover-pending"  # gateway-owned while a home's handover is unfinished
HANDOVER_MARKER_MODE = 0o0600  # rw-------
TEMPLATE_MARKER = ".template-pending"  # gateway-owned while a new home's seeding is unfinished
TEMPLATE_MARKER_MODE = 0o0600  # rw-------
TEMPLATE_PERSONAS = (".jazz", "personas")  # where a home's personas are for the released CLI
