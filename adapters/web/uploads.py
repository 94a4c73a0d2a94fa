"""Files a person sends with a web chat message, kept between its ``202`` and its turn.

Slack and Telegram keep a person's file until the turn fetches it (``Surface.download``);
the web chat has no platform to keep it, and a message is acknowledged once stored, before
its conversation has an account or a home to save into. So an upload is written to
``<root>/state/web-uploads/`` (the gateway's alone: 0700, files 0600), under a random id
its message's attachment names, flushed to disk before the message is stored; the turn
takes it from there (:meth:`StagedUploads.take`, through the web surface's ``download``)
and saves it into the home with the same code as every platform's attachment
(:func:`bridge.files.save_attachment`: pinned directories, no link followed, the home's
owner and modes). Taking it removes it.

A file is written under a hidden ``.partial-`` name and renamed to its id only once it is
complete: a refused upload (too big, a bad form, the client gone) leaves nothing. One no
message will take (its message refused, a duplicate, a crash between the write and the
store) is removed by :meth:`StagedUploads.sweep`, at start and every hour.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import stat
import time
from collections.abc import Iterable
from pathlib import Path

from bridge.ports import DeliveryError, FileTooLarge
from provisioning import pinned
from provisioning.layout import Layout
from provisioning.modes import STAGED_UPLOAD_FILE_MODE, STAGED_UPLOADS_DIR_MODE

log = logging.getLogger(__name__)

STAGE_DIR = "web-uploads"  # in <root>/state
PARTIAL_PREFIX = ".partial-"
UPLOAD_ID = re.compile(r"[0-9a-f]{32}")  # what secrets.token_hex(16) makes: nothing else
# an upload no message takes is kept this long at least: the time between its write and its
# message's store write (milliseconds) with room to spare
STAGE_GRACE_S = 600.0


class UploadGone(DeliveryError):
    """The upload a message names is no longer staged (taken already, or swept)."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"the file {name} is no longer on the gateway (it was removed before the agent "
            "could get it); send it again",
            permanent=True,
        )


class StagedUploads:
    """``<root>/state/web-uploads``: each upload one file named by its id. Blocking: call
    every method but :meth:`open_partial`'s writes through ``asyncio.to_thread``."""

    def __init__(self, root: Path) -> None:
        self.state = Layout(root).state

    def _dir(self) -> int:
        """The stage directory, opened (made when missing, its mode put back); close it."""
        with pinned.opened_dir(self.state) as state_fd:
            return pinned.ensure_dir(state_fd, STAGE_DIR, STAGED_UPLOADS_DIR_MODE)

    def open_partial(self) -> tuple[str, int]:
        """A new upload's id and a descriptor to write it through (:meth:`finish` or
        :meth:`discard` it)."""
        upload_id = secrets.token_hex(16)
        dir_fd = self._dir()
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(PARTIAL_PREFIX + upload_id, flags, STAGED_UPLOAD_FILE_MODE, dir_fd=dir_fd)
            os.fchmod(fd, STAGED_UPLOAD_FILE_MODE)  # whatever the umask
        finally:
            os.close(dir_fd)
        return upload_id, fd

    @staticmethod
    def write(fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    def finish(self, upload_id: str, fd: int) -> None:
        """Flush the upload to disk and give it its id: its message may name it now."""
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        dir_fd = self._dir()
        try:
            os.rename(PARTIAL_PREFIX + upload_id, upload_id, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            os.fsync(dir_fd)  # the rename survives a power cut
        finally:
            os.close(dir_fd)

    def discard(self, upload_id: str, fd: int | None = None) -> None:
        """Remove an upload, finished or not (and close its descriptor). Never raises."""
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        try:
            dir_fd = self._dir()
        except OSError as exc:
            log.warning("web: cannot open the staged uploads to remove %s: %s", upload_id, exc)
            return
        try:
            for name in (PARTIAL_PREFIX + upload_id, upload_id):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dir_fd)
        except OSError as exc:
            log.warning("web: cannot remove the staged upload %s: %s", upload_id, exc)
        finally:
            os.close(dir_fd)

    def take(self, upload_id: str, name: str, max_bytes: int) -> bytes:
        """The upload's bytes, removed from the stage. :class:`UploadGone` when it is not
        there, :class:`~bridge.ports.FileTooLarge` over ``max_bytes`` (removed too)."""
        if not UPLOAD_ID.fullmatch(upload_id):
            raise UploadGone(name)
        dir_fd = self._dir()
        try:
            try:
                fd = os.open(upload_id, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            except FileNotFoundError:
                raise UploadGone(name) from None
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise UploadGone(name)
                if st.st_size > max_bytes:
                    raise FileTooLarge(name, max_bytes, st.st_size)
                with os.fdopen(fd, "rb", closefd=False) as fh:
                    data = fh.read(max_bytes + 1)
            finally:
                os.close(fd)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(upload_id, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        if len(data) > max_bytes:
            raise FileTooLarge(name, max_bytes)
        return data

    def sweep(self, keep: Iterable[str], now: float | None = None) -> int:
        """Remove what no message will take: every upload not in ``keep`` (the ids named by
        messages still waiting for their turn) and every partial, once older than
        :data:`STAGE_GRACE_S`; how many went."""
        kept = set(keep)
        horizon = (time.time() if now is None else now) - STAGE_GRACE_S
        removed = 0
        try:
            dir_fd = self._dir()
        except OSError as exc:
            log.warning("web: cannot open the staged uploads to sweep them: %s", exc)
            return 0
        try:
            for entry in os.listdir(dir_fd):
                upload_id = entry.removeprefix(PARTIAL_PREFIX)
                if not UPLOAD_ID.fullmatch(upload_id) or entry in kept:
                    continue
                try:
                    st = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode) and st.st_mtime < horizon:
                        os.unlink(entry, dir_fd=dir_fd)
                        removed += 1
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    log.warning("web: cannot remove the staged upload %s: %s", entry, exc)
        finally:
            os.close(dir_fd)
        if removed:
            log.info("web: removed %d staged upload(s) no message took", removed)
        return removed
