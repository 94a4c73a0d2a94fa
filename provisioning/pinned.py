"""File-descriptor-pinned operations inside directories a conversation can write to.

A conversation owns its home, so between two system calls it can swap any entry for a
symbolic link. Every change made inside a home therefore goes through a directory file
descriptor opened with ``O_NOFOLLOW`` and names a single entry relative to it; nothing
here ever re-resolves a path through a directory a conversation controls, and nothing
follows a link.

Changing the mode of a non-directory without following it pins the entry first: an
``O_PATH | O_NOFOLLOW`` descriptor, whose ``fstat`` must be the inode the caller examined
(so an entry swapped for a link, or for a hard link to another account's file, is left
alone), changed through that descriptor with Linux's ``fchmodat2(fd, "", AT_EMPTY_PATH |
AT_SYMLINK_NOFOLLOW)`` (kernel 6.6+) or, on older kernels, ``chmod`` of
``/proc/self/fd/N`` (which the kernel allows for an ``O_PATH`` descriptor). Nothing is ever
changed by name.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import UnsafePathError

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
AT_SYMLINK_NOFOLLOW = 0x100
AT_EMPTY_PATH = 0x1000
_SYS_FCHMODAT2 = 452  # same number on every Linux architecture (unified syscall table)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_fchmodat2_works: bool | None = None


def _fchmodat2(dir_fd: int, name: bytes, mode: int, flags: int = AT_SYMLINK_NOFOLLOW) -> int:
    """Return 0 on success, else the errno (ENOSYS where the kernel lacks it)."""
    res = _libc.syscall(
        ctypes.c_long(_SYS_FCHMODAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(name),
        ctypes.c_uint(mode),
        ctypes.c_uint(flags),
    )
    return 0 if res == 0 else ctypes.get_errno()


def open_dir(name: str | bytes | os.PathLike[str], dir_fd: int | None = None) -> int:
    """Open a directory without following a link; UnsafePathError if it is not one."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePathError(
                f"{os.fsdecode(name)!s} is a symbolic link or not a directory; refusing to use it"
            ) from exc
        raise


@contextmanager
def opened_dir(name: str | bytes | os.PathLike[str], dir_fd: int | None = None) -> Iterator[int]:
    fd = open_dir(name, dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def chmod_entry(dir_fd: int, name: str | bytes, mode: int, expect: os.stat_result) -> bool:
    """Set ``mode`` on the non-directory ``name`` in ``dir_fd`` without following a link.

    ``expect`` is the entry's lstat. The entry is pinned (``O_PATH | O_NOFOLLOW``) and must
    still be that inode, with that owner, and not a link; only then is the pinned inode
    changed. Returns False when the entry is a link, was swapped or is gone (nothing
    changed).
    """
    with _pinned_entry(dir_fd, name, expect) as pinned:
        if pinned is None:
            return False
        fd, st = pinned
        if stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode):
            return False
        return _chmod_pinned(fd, mode, os.fsdecode(name))


def chown_entry(
    dir_fd: int, name: str | bytes, uid: int, gid: int, mode: int, expect: os.stat_result
) -> bool:
    """Give the regular file ``name`` in ``dir_fd`` to ``uid:gid`` with ``mode``, pinned.

    ``expect`` is the entry's lstat. The entry is pinned (``O_PATH | O_NOFOLLOW``: never
    opened for reading, so a FIFO or device swapped in is harmless) and must still be that
    inode with that owner, a regular file with a single link (a hard link could be a file
    from anywhere on this file system); only then is the pinned inode chowned (``fchownat``
    with ``AT_EMPTY_PATH``, which clears setuid/setgid) and then its mode set. Returns False,
    changing nothing, when the entry is a link, was swapped, has another name or is gone.
    """
    with _pinned_entry(dir_fd, name, expect) as pinned:
        if pinned is None:
            return False
        fd, st = pinned
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            return False
        _chown_pinned(fd, uid, gid, os.fsdecode(name))
        return _chmod_pinned(fd, mode, os.fsdecode(name))


@contextmanager
def _pinned_entry(
    dir_fd: int, name: str | bytes, expect: os.stat_result
) -> Iterator[tuple[int, os.stat_result] | None]:
    """``name`` in ``dir_fd`` pinned (``O_PATH | O_NOFOLLOW``) with its fstat, or None when
    it is gone or no longer the inode and owner ``expect`` (its lstat) says."""
    try:
        fd = os.open(os.fsencode(name), PATH_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        yield None
        return
    try:
        st = os.fstat(fd)
        same = (st.st_ino, st.st_dev, st.st_uid) == (expect.st_ino, expect.st_dev, expect.st_uid)
        yield (fd, st) if same else None
    finally:
        os.close(fd)


def _chown_pinned(fd: int, uid: int, gid: int, name: str) -> None:
    """chown the inode an O_PATH descriptor pins (``fchownat(fd, "", AT_EMPTY_PATH)``)."""
    res = _libc.fchownat(
        ctypes.c_int(fd),
        ctypes.c_char_p(b""),
        ctypes.c_uint(uid),
        ctypes.c_uint(gid),
        ctypes.c_int(AT_EMPTY_PATH),
    )
    if res != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), name)


def _chmod_pinned(fd: int, mode: int, name: str) -> bool:
    """chmod the inode an O_PATH descriptor pins (never a name a conversation can swap)."""
    global _fchmodat2_works
    if _fchmodat2_works is not False:
        err = _fchmodat2(fd, b"", mode, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)
        if err == 0:
            _fchmodat2_works = True
            return True
        if err == errno.EOPNOTSUPP:  # a symbolic link: left alone
            return False
        if err not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(err, os.strerror(err), name)
        _fchmodat2_works = False  # an older kernel (no fchmodat2 or no AT_EMPTY_PATH)
    os.chmod(f"/proc/self/fd/{fd}", mode)
    return True


RENAME_NOREPLACE = 1  # renameat2 flag: fail with EEXIST rather than replace the target


def rename_noreplace(dir_fd: int, src: str, dst: str) -> bool:
    """Rename ``src`` to ``dst``, both in ``dir_fd``, unless ``dst`` exists (any kind, a
    link included); False when it does (nothing renamed: the caller removes ``src``).

    ``renameat2(RENAME_NOREPLACE)``: atomic, never replaces nor follows anything. On a file
    system (or libc) without it, ``linkat`` (which fails when ``dst`` exists and does not
    follow ``src``) and then unlinking ``src``: the entry has two names for that moment.
    """
    renameat2 = getattr(_libc, "renameat2", None)
    if renameat2 is not None:
        res = renameat2(
            ctypes.c_int(dir_fd),
            ctypes.c_char_p(os.fsencode(src)),
            ctypes.c_int(dir_fd),
            ctypes.c_char_p(os.fsencode(dst)),
            ctypes.c_uint(RENAME_NOREPLACE),
        )
        if res == 0:
            return True
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            return False
        if err not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(err, os.strerror(err), dst)
    try:
        os.link(src, dst, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError:
        return False
    os.unlink(src, dir_fd=dir_fd)
    return True


def ensure_dir(
    dir_fd: int,
    name: str,
    mode: int,
    uid: int | None = None,
    gid: int | None = None,
    *,
    drop_acl: bool = False,
) -> int:
    """Create (or repair) directory ``name`` in ``dir_fd`` with owner and exact mode.

    Returns an open descriptor of it (the caller closes it). Ownership is set before the
    mode, because chown clears the setgid bit. ``drop_acl``: see :func:`set_owner_and_mode`.
    """
    try:
        os.mkdir(name, mode & 0o777, dir_fd=dir_fd)
    except FileExistsError:
        pass
    fd = open_dir(name, dir_fd)
    try:
        set_owner_and_mode(fd, mode, uid, gid, drop_acl=drop_acl)
    except BaseException:
        os.close(fd)
        raise
    return fd


ACL_XATTRS = ("system.posix_acl_access", "system.posix_acl_default")
_NO_ACL = (errno.ENODATA, errno.EOPNOTSUPP)  # none there; a file system without ACLs


def drop_acls(fd: int) -> bool:
    """Remove the POSIX ACLs (access and default) of the inode ``fd`` opens; True if any.

    With an access ACL a mode's group bits are only its mask: the owning group's own entry
    (``---``, say) and named entries (another account's ``r-x``) decide, unseen by a stat.
    """
    dropped = False
    for name in ACL_XATTRS:
        try:
            os.removexattr(fd, name)
        except OSError as exc:
            if exc.errno not in _NO_ACL:
                raise
        else:
            dropped = True
    return dropped


def has_acl(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` itself (never a link's target) has a POSIX ACL."""
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in _NO_ACL:
            return False
        raise
    return any(name in ACL_XATTRS for name in names)


def set_owner_and_mode(
    fd: int, mode: int, uid: int | None, gid: int | None, *, drop_acl: bool = False
) -> bool:
    """fchown (when it differs) then fchmod (when it differs); True when anything changed.

    With ``drop_acl`` any POSIX ACL goes first, so that the exact mode is the whole of who
    may do what (a conversation's own directories: it can set an ACL on what it owns).
    """
    changed = drop_acls(fd) if drop_acl else False
    st = os.fstat(fd)
    want_uid = st.st_uid if uid is None else uid
    want_gid = st.st_gid if gid is None else gid
    if (st.st_uid, st.st_gid) != (want_uid, want_gid):
        os.fchown(fd, want_uid, want_gid)
        changed = True
        st = os.fstat(fd)
    if stat.S_IMODE(st.st_mode) != mode:
        os.fchmod(fd, mode)
        changed = True
    return changed
