"""The log file: capped in size, following its path, private to the gateway and its group.

The log file is never readable by "other" (:data:`LOG_FILE_MODE`, whatever the umask): the
conversations' accounts are "other" to it, and it names every conversation (at DEBUG the
platform libraries log the text of every message they send).
"""

from __future__ import annotations

import contextlib
import io
import logging
import logging.handlers
import os
import stat
import sys
from typing import cast

# The log file's mode when it is made: the gateway and its group (the operators, when it is
# under the root), never "other", whose accounts include every conversation's
LOG_FILE_MODE = 0o640


class CappedFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating log file whose size stays capped with ``backupCount=0`` too, and that
    follows its path when someone else moves or removes the file.

    RotatingFileHandler keeps no older file then, and it only reopens the full file for
    appending: ``log.backups = 0`` would let the file grow without bound. Here the full
    file is emptied instead, so at most ``(backups + 1) * max_bytes`` is ever on disk.

    A file moved away (logrotate), removed (``rm`` to free the disk) or rotated by another
    ``jazz-bridge`` process writing the same file is noticed at the next line, which goes
    into a new file at the path, as ``WatchedFileHandler`` does: the open file would
    otherwise take every later line (a removed one filling the disk unseen).

    A file that cannot be written (its disk full) is said once on stderr, naming it and why,
    and once more when it takes lines again, not with logging's traceback for every line
    (some 25 lines of noise each, around the lines themselves on stderr). The open file is
    dropped at a failed write, with what its buffer held of the lost lines: written later,
    that would glue a torn line to the next one.
    """

    _failing: str | None = None  # why the file could not be written, said once
    _failed_now = False

    def emit(self, record: logging.LogRecord) -> None:
        self._reopen_if_replaced()
        self._failed_now = False
        super().emit(record)  # a failure comes back through handleError
        if self._failing is not None and not self._failed_now:
            self._failing = None
            _say(f"jazz-bridge: the log file {self.baseFilename} is written again")

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            super().handleError(record)
            return
        self._failed_now = True
        stream, self.stream = self.stream, None  # a fresh one next line, its buffer empty
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.close()  # the descriptor too, even when its last flush fails
        why = exc.strerror or str(exc)
        if why != self._failing and logging.raiseExceptions:
            _say(
                f"jazz-bridge: warning: cannot write the log file {self.baseFilename} ({why}): "
                "its lines are lost until it can be written again (stderr still has them)"
            )
        self._failing = why

    def _open(self) -> io.TextIOWrapper:
        """The file, made ``LOG_FILE_MODE`` whatever the umask (and an existing one of ours
        stripped of its "other" bits): a conversation's run must not read the gateway's log,
        which names every conversation and, at DEBUG, holds their messages."""
        stream = open(  # noqa: SIM115  # the handler keeps it open
            self.baseFilename,
            self.mode,
            encoding=self.encoding,
            errors=self.errors,
            opener=_private_opener,
        )
        _strip_other_bits(stream.fileno())
        if self._failing is not None and _ends_torn(self.baseFilename):
            stream.write("\n")  # the line a failed write cut stays apart from the next
        return cast(io.TextIOWrapper, stream)  # a text mode: open gives a TextIOWrapper

    def _reopen_if_replaced(self) -> None:
        """Close the open file when the path no longer names it (emit opens the new one)."""
        if self.stream is None:
            return
        try:
            on_path = os.stat(self.baseFilename)
        except FileNotFoundError:
            on_path = None
        except OSError:
            return  # cannot tell (a directory on the way unreadable): keep writing
        try:
            opened = os.fstat(self.stream.fileno())
        except (OSError, ValueError):
            opened = None
        if (
            on_path is not None
            and opened is not None
            and (on_path.st_dev, on_path.st_ino) == (opened.st_dev, opened.st_ino)
        ):
            return
        stream, self.stream = self.stream, None
        with contextlib.suppress(OSError, ValueError):
            stream.close()

    def doRollover(self) -> None:
        super().doRollover()
        if self.backupCount == 0 and os.path.isfile(self.baseFilename):
            os.truncate(self.baseFilename, 0)  # the stream appends: it writes from 0 again


def _ends_torn(path: str) -> bool:
    """Whether the file at ``path`` ends inside a line (a write cut short by a full disk)."""
    try:
        with open(path, "rb") as file:
            if file.seek(0, os.SEEK_END) == 0:
                return False
            file.seek(-1, os.SEEK_END)
            return file.read(1) != b"\n"
    except OSError:
        return False


def _say(line: str) -> None:
    """One line to stderr, outside logging (about the log itself)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _private_opener(path: str, flags: int) -> int:
    """``os.open`` creating the file ``LOG_FILE_MODE`` (the umask can only take bits away)."""
    return os.open(path, flags | os.O_CLOEXEC, LOG_FILE_MODE)


def _strip_other_bits(fd: int) -> None:
    """A log file left readable by others (an older version's, made under umask 022) loses
    its "other" bits; one another account owns is left alone (its owner's choice)."""
    with contextlib.suppress(OSError):  # a filesystem without modes: keep logging
        st = os.fstat(fd)
        if st.st_mode & 0o007 and st.st_uid == os.geteuid():
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~0o007)
