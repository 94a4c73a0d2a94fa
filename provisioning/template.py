"""Seeding a new conversation's home from the operator's home template.

Why: the released Jazz CLI fails every run in a new, empty home with ``No agent found with
ID: ...``: a Jazz home needs ``config.json`` (provider settings) and ``agents/<id>.json``.
An operator keeps one directory with those (``runner.home_template``: ``config.json``,
``agents/``, optionally ``personas/`` and anything else) and every new home starts as a copy
of it.

When: only a home's first ``Homes.ensure``, the one that creates it (an empty home directory
counts as new), before the home is handed to any run. A marker (``modes.TEMPLATE_MARKER``,
the gateway's, ``0600``, flushed) is written in the new home first and removed once the copy
finished, so a crash or a failure midway is finished by the next ensure. A file or link the
home already has is never replaced (nor is an existing directory's mode changed): editing
the template later changes no conversation made before.

How: the template is read through directory descriptors opened without following links,
and nothing in it that is a symbolic link (or a FIFO, socket or device) is copied: each is
skipped with a warning naming it. Writes into the home go through pinned directory
descriptors as well (:mod:`provisioning.pinned`): a file's data is copied (never a hard
link) into a temporary name, owner and mode set, flushed, then renamed to its name only if
that name is still free (``RENAME_NOREPLACE``), so a run never sees half a file. Owners and
modes are the home's: isolated, ``conv:O`` with directories ``2750`` and files ``0640``
(``0750`` when the template's file has its owner's execute bit); single-account, the
gateway's, ``0700``/``0600`` (``0700``); the top-level ``config.json`` is ``0600`` as every
home's is (it holds provider settings).

Personas: the released CLI reads them from ``~/.jazz/personas`` (``HOME``, which an isolated
run has set to its home), not ``$JAZZ_HOME/personas`` (the link to the shared
``<root>/personas`` every home has). So the template's ``personas/`` is copied to
``<home>/.jazz/personas/``, and at every ensure each entry of the shared ``<root>/personas/``
gets a link of its own there (unless that name is taken; links to shared entries since
removed are removed), as the shared link does for the documented CLI.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import stat
from pathlib import Path

from . import pinned
from .errors import TemplateError, UnsafePathError
from .modes import (
    CONFIG_FILE,
    CONFIG_FILE_MODE,
    HANDOVER_MARKER,
    HOME_SUBDIR_MODE,
    PRIVATE_DIR_MODE,
    PRIVATE_FILE_MODE,
    REPAIR_MARKER,
    TEMPLATE_MARKER,
    TEMPLATE_MARKER_MODE,
    TEMPLATE_PERSONAS,
)

log = logging.getLogger(__name__)

PERSONAS = "personas"
RESERVED = frozenset({TEMPLATE_MARKER, HANDOVER_MARKER, REPAIR_MARKER})  # never copied
ISOLATED_FILE_MODE = 0o0640  # rw-r-----  conv:O
CHUNK = 1024 * 1024

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def is_new(chats_fd: int, name: str) -> bool:
    """Whether the home ``name`` in ``chats_fd`` is yet to be made: absent, or an empty
    directory (made by an ensure that stopped before writing the marker). Blocking."""
    try:
        fd = pinned.open_dir(name, chats_fd)
    except FileNotFoundError:
        return True
    except (OSError, UnsafePathError):
        return False  # a link or a file (refused by the caller with its own message)
    try:
        with os.scandir(fd) as entries:
            return next(entries, None) is None
    finally:
        os.close(fd)


def mark_pending(home_fd: int, where: str) -> None:
    """Write the marker saying the seeding of ``home_fd`` is due (flushed)."""
    try:
        fd = os.open(TEMPLATE_MARKER, _CREATE, TEMPLATE_MARKER_MODE, dir_fd=home_fd)
    except FileExistsError:
        return
    except OSError as exc:
        raise TemplateError(
            f"cannot mark {where} for seeding from the home template: {exc.strerror or exc}"
        ) from exc
    try:
        os.fchmod(fd, TEMPLATE_MARKER_MODE)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.fsync(home_fd)


def pending(home_fd: int) -> bool:
    """Whether the marker is there: a regular file of the gateway's with one link (one a
    conversation made is not ours)."""
    try:
        st = os.stat(TEMPLATE_MARKER, dir_fd=home_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_nlink == 1


def seed(template: Path, home_fd: int, where: str, *, uid: int, gid: int, isolated: bool) -> int:
    """Copy ``template`` into the home ``home_fd`` (at ``where``), then drop the marker.

    Returns how many entries were made. Raises :class:`TemplateError` when the template
    cannot be read or the home written; the marker then stays, and the next ensure tries
    again (what was copied is kept: nothing is ever copied twice).
    """
    copier = _Copier(str(template), where, uid, gid, isolated)
    try:
        src_fd = pinned.open_dir(template)
    except (OSError, UnsafePathError) as exc:
        raise TemplateError(
            f"home template {template} cannot be read ({_why(exc)}); {where} is seeded from "
            "it at its next message once it can (check runner.home_template)"
        ) from exc
    try:
        copier.tree(src_fd, home_fd, str(template), where, top=True)
        os.fsync(home_fd)  # every entry made is on disk before the marker goes
        _unlink_quietly(home_fd, TEMPLATE_MARKER)
    except OSError as exc:
        raise TemplateError(f"cannot seed {where} from {template}: {_why(exc)}") from exc
    finally:
        os.close(src_fd)
    if copier.made:
        log.info("seeded %s from home template %s: %d entries", where, template, copier.made)
    return copier.made


class _Copier:
    def __init__(self, template: str, home: str, uid: int, gid: int, isolated: bool) -> None:
        self.template = template
        self.home = home
        self.uid = uid
        self.gid = gid
        self.isolated = isolated
        self.made = 0

    def dir_mode(self) -> int:
        return HOME_SUBDIR_MODE if self.isolated else PRIVATE_DIR_MODE

    def file_mode(self, src_mode: int, *, config: bool) -> int:
        if config:
            return CONFIG_FILE_MODE if self.isolated else PRIVATE_FILE_MODE
        mode = ISOLATED_FILE_MODE if self.isolated else PRIVATE_FILE_MODE
        if src_mode & stat.S_IXUSR:
            mode |= stat.S_IXUSR | (stat.S_IXGRP if self.isolated else 0)
        return mode

    def tree(self, src_fd: int, dst_fd: int, src: str, dst: str, *, top: bool = False) -> None:
        """Every entry of the directory ``src_fd`` into the directory ``dst_fd``."""
        try:
            names = sorted(os.listdir(src_fd))
        except OSError as exc:
            raise TemplateError(f"cannot list home template directory {src}: {_why(exc)}") from exc
        for name in names:
            if top and name in RESERVED:
                log.warning(
                    "home template entry %s/%s is a name the gateway uses: not copied", src, name
                )
                continue
            if top and name == PERSONAS:
                jazz_fd = self.directory(dst_fd, TEMPLATE_PERSONAS[0], dst)
                if jazz_fd is None:
                    continue
                try:
                    self.entry(
                        src_fd,
                        name,
                        jazz_fd,
                        TEMPLATE_PERSONAS[1],
                        src,
                        f"{dst}/{TEMPLATE_PERSONAS[0]}",
                    )
                    os.fsync(jazz_fd)
                finally:
                    os.close(jazz_fd)
                continue
            self.entry(src_fd, name, dst_fd, name, src, dst, config=top and name == CONFIG_FILE)

    def entry(
        self,
        src_fd: int,
        name: str,
        dst_fd: int,
        dst_name: str,
        src: str,
        dst: str,
        *,
        config: bool = False,
    ) -> None:
        path = f"{src}/{name}"
        try:
            st = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
        except FileNotFoundError:
            return  # gone since it was listed
        except OSError as exc:
            raise TemplateError(f"cannot read home template entry {path}: {_why(exc)}") from exc
        if stat.S_ISLNK(st.st_mode):
            log.warning(
                "home template entry %s is a symbolic link: not copied into %s (links in the "
                "template are never followed; put the file itself there)",
                path,
                self.home,
            )
        elif stat.S_ISDIR(st.st_mode):
            self.subtree(src_fd, name, st, dst_fd, dst_name, path, f"{dst}/{dst_name}")
        elif stat.S_ISREG(st.st_mode):
            self.file(src_fd, name, st, dst_fd, dst_name, path, f"{dst}/{dst_name}", config)
        else:
            log.warning(
                "home template entry %s is not a regular file or directory (%s): not copied",
                path,
                stat.filemode(st.st_mode),
            )

    def subtree(
        self,
        src_fd: int,
        name: str,
        st: os.stat_result,
        dst_fd: int,
        dst_name: str,
        src: str,
        dst: str,
    ) -> None:
        try:
            child_src = pinned.open_dir(name, src_fd)
        except (OSError, UnsafePathError) as exc:
            raise TemplateError(f"cannot open home template directory {src}: {_why(exc)}") from exc
        try:
            got = os.fstat(child_src)
            if (got.st_dev, got.st_ino) != (st.st_dev, st.st_ino):
                raise TemplateError(f"home template directory {src} changed while it was copied")
            child_dst = self.directory(dst_fd, dst_name, dst.rsplit("/", 1)[0])
            if child_dst is None:
                return
            try:
                self.tree(child_src, child_dst, src, dst)
                os.fsync(child_dst)
            finally:
                os.close(child_dst)
        finally:
            os.close(child_src)

    def directory(self, parent_fd: int, name: str, parent: str) -> int | None:
        """The directory ``name`` in ``parent_fd``, made (owner, mode) when missing, opened
        without following a link; None (with a warning) when the home has something else
        there. An existing directory is left as it is."""
        where = f"{parent}/{name}"
        try:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
            made = True
        except FileExistsError:
            made = False
        except OSError as exc:
            raise TemplateError(f"cannot make {where}: {_why(exc)}") from exc
        try:
            fd = pinned.open_dir(name, parent_fd)
        except UnsafePathError:
            log.warning(
                "%s is a link or not a directory: left alone, nothing copied into it", where
            )
            return None
        except OSError as exc:
            raise TemplateError(f"cannot open {where}: {_why(exc)}") from exc
        if made:
            try:
                os.fchown(fd, self.uid, self.gid)  # before the mode: chown clears setgid
                os.fchmod(fd, self.dir_mode())
            except OSError as exc:
                os.close(fd)
                raise TemplateError(
                    f"cannot set the owner and mode of {where}: {_why(exc)}"
                ) from exc
            self.made += 1
        return fd

    def file(
        self,
        src_fd: int,
        name: str,
        st: os.stat_result,
        dst_fd: int,
        dst_name: str,
        src: str,
        dst: str,
        config: bool,
    ) -> None:
        if _exists(dst_fd, dst_name):
            return  # the home's own: never replaced
        try:
            in_fd = os.open(name, _READ, dir_fd=src_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # swapped for a link since it was listed
                log.warning("home template entry %s is a symbolic link: not copied", src)
                return
            raise TemplateError(f"cannot read home template file {src}: {_why(exc)}") from exc
        try:
            got = os.fstat(in_fd)
            if not stat.S_ISREG(got.st_mode) or (got.st_dev, got.st_ino) != (st.st_dev, st.st_ino):
                raise TemplateError(f"home template file {src} changed while it was copied")
            mode = self.file_mode(stat.S_IMODE(got.st_mode), config=config)
            tmp = f".{dst_name[:64]}.seed-{secrets.token_hex(6)}.tmp"
            try:
                out_fd = os.open(tmp, _CREATE, 0o600, dir_fd=dst_fd)
            except OSError as exc:
                raise TemplateError(f"cannot write {dst}: {_why(exc)}") from exc
            try:
                try:
                    _copy_data(in_fd, out_fd, src)
                    os.fchown(out_fd, self.uid, self.gid)  # before the mode: chown clears setuid
                    os.fchmod(out_fd, mode)
                    os.fsync(out_fd)
                finally:
                    os.close(out_fd)
                placed = pinned.rename_noreplace(dst_fd, tmp, dst_name)
            except BaseException as exc:
                _unlink_quietly(dst_fd, tmp)
                if isinstance(exc, OSError):
                    raise TemplateError(f"cannot write {dst}: {_why(exc)}") from exc
                raise
            if placed:
                self.made += 1
            else:
                _unlink_quietly(dst_fd, tmp)  # something took the name meanwhile: it stays
        finally:
            os.close(in_fd)


def _copy_data(in_fd: int, out_fd: int, src: str) -> None:
    while True:
        try:
            data = os.read(in_fd, CHUNK)
        except OSError as exc:
            raise TemplateError(f"cannot read home template file {src}: {_why(exc)}") from exc
        if not data:
            return
        view = memoryview(data)
        while view:
            view = view[os.write(out_fd, view) :]


def link_shared_personas(
    home_fd: int, where: str, shared: Path, *, uid: int, gid: int, isolated: bool
) -> None:
    """A link in ``<home>/.jazz/personas/`` to each entry of the shared ``shared`` (the
    root's ``personas/``) whose name is free there; links to shared entries since removed
    go. Failures are logged, not raised: a run goes ahead without them. Blocking."""
    try:
        with pinned.opened_dir(shared) as shared_fd:
            names = set(os.listdir(shared_fd))
    except (OSError, UnsafePathError) as exc:
        log.warning(
            "shared personas %s unreadable (%s): not linked into %s", shared, _why(exc), where
        )
        return
    jazz, personas = TEMPLATE_PERSONAS
    if not names and not _exists(home_fd, jazz):
        return  # nothing to link, nothing linked before
    copier = _Copier(str(shared), where, uid, gid, isolated)
    try:
        jazz_fd = copier.directory(home_fd, jazz, where)
        if jazz_fd is None:
            return
        try:
            personas_fd = copier.directory(jazz_fd, personas, f"{where}/{jazz}")
        finally:
            os.close(jazz_fd)
        if personas_fd is None:
            return
        try:
            _sync_links(personas_fd, str(shared), names)
        finally:
            os.close(personas_fd)
    except (OSError, TemplateError) as exc:
        log.warning(
            "shared personas not linked into %s/%s/%s: %s", where, jazz, personas, _why(exc)
        )


def _sync_links(personas_fd: int, shared: str, names: set[str]) -> None:
    present = set(os.listdir(personas_fd))
    for name in sorted(names - present):
        try:
            os.symlink(f"{shared}/{name}", name, dir_fd=personas_fd)
        except FileExistsError:
            pass
    for name in sorted(present - names):
        try:
            target = os.readlink(name, dir_fd=personas_fd)
        except OSError:
            continue  # not a link: the conversation's (or the template's) own
        if target == f"{shared}/{name}":
            _unlink_quietly(personas_fd, name)


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _unlink_quietly(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)
