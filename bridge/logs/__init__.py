"""How the gateway's log lines look, and the guarantee that no secret reaches them.

A service's log is read by machines (journald, a collector) and by people at a terminal, so
the format follows where it goes: one JSON object per line when the stream is not a
terminal (or ``log.format = "json"``), a readable line on a terminal (or ``"text"``).
Fields passed as ``extra={...}`` become JSON keys (``key=value`` in text), so a turn's line
carries its thread key, outcome and duration as data, not prose.

:class:`SecretMasker` sits on every handler and replaces the value of every configured
secret (each ``SecretStr`` in the settings, adapter sections included, every value of
``runner.extra_env``, a URL's password) and of secret-looking environment variables wherever
it appears: the message, its arguments, extra fields and tracebacks. A Telegram token inside
a URL an HTTP library logs is masked like any other, and so is the password of any URL. A
secret a length cap cut before it was masked (a run's stderr lines shown in the chat) is
masked up to the cut: its first characters ending a line, or its last ones starting one.

Writing is a thread's job (:func:`off_thread`): a log line is a blocking write to a file or
a pipe (journald, a container runtime), and one that blocks (a full pipe, a slow disk) would
stop the event loop with it. Callers only queue the record; a writer thread masks, formats
and writes it; what is queued is written at exit (:func:`stop_writer`).

The log file is never readable by "other" (:data:`LOG_FILE_MODE`, whatever the umask): the
conversations' accounts are "other" to it, and it names every conversation (at DEBUG the
platform libraries log the text of every message they send).
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import io
import json
import logging
import logging.handlers
import os
import queue
import re
import stat
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import IO, Any, Literal, cast

from pydantic import BaseModel, SecretStr

LogFormat = Literal["auto", "json", "text"]

MASK = "***"
# The log file's mode when it is made: the gateway and its group (the operators, when it is
# under the root), never "other", whose accounts include every conversation's
LOG_FILE_MODE = 0o640
# Shorter values would mask ordinary words; real tokens and secrets are far longer.
MIN_SECRET_LEN = 6
# Environment variables whose values are treated as secrets: names (upper-cased) holding one
# of these, or ending in SECRET_ENV_SUFFIX (AZURE_OPENAI_KEY, which runs are given by name)
SECRET_ENV_HINTS = ("TOKEN", "SECRET", "PASSWORD", "API_KEY", "ACCESS_KEY")
SECRET_ENV_SUFFIX = "KEY"  # noqa: S105  # a part of a name, not a secret
# The user information of a URL (``scheme://user:password@host``); it cannot hold / ? # @
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#@\s]+)@")


class SecretValues:
    """Marks a settings field whose every value is a secret: ``Annotated[dict[str, str],
    SECRET_VALUES]`` (``runner.extra_env``, which is passed to runs and holds provider keys).
    Each string in it, a table's values included, is masked like a ``SecretStr``'s: in log
    lines and in ``config check``."""

    def __repr__(self) -> str:
        return "SECRET_VALUES"


SECRET_VALUES = SecretValues()


def url_secrets(text: str) -> list[str]:
    """The credentials of each URL in ``text``: its password, or its user name when it has
    no password (a token given as the user name)."""
    found = []
    if "://" in text and "@" in text:
        for match in _URL_USERINFO.finditer(text):
            user, colon, password = match.group("userinfo").partition(":")
            secret = password if colon else user
            if secret:
                found.append(secret)
    return found


def mask_url_credentials(text: str) -> str:
    """``text`` with the credentials of each URL masked (``https://user:***@host``)."""
    if "://" not in text or "@" not in text:
        return text

    def masked(match: re.Match[str]) -> str:
        user, colon, _password = match.group("userinfo").partition(":")
        return f"{match.group('scheme')}{f'{user}:{MASK}' if colon else MASK}@"

    return _URL_USERINFO.sub(masked, text)


def is_secret_field(info: Any) -> bool:
    """Whether a pydantic field's values are all secrets (:data:`SECRET_VALUES`)."""
    return any(item is SECRET_VALUES for item in getattr(info, "metadata", ()))


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(
    {
        *logging.LogRecord("", 0, "", 0, "", (), None).__dict__,
        "message",
        "asctime",
        "taskName",
    }
)


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a caller passed with ``extra=`` (in the order given)."""
    return {
        k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")
    }


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the extra fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in extra_fields(record).items():
            data.setdefault(key, value)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            data["exc"] = record.exc_text
        if record.stack_info:
            data["stack"] = record.stack_info
        return json.dumps(data, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The classic one-line format, with the extra fields appended as ``key=value``."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        extras = extra_fields(record)
        if extras:
            line += " " + " ".join(f"{k}={_text_value(v)}" for k, v in extras.items())
        return line


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return json.dumps(text) if (not text or any(c.isspace() or c == '"' for c in text)) else text


class SecretMasker(logging.Filter):
    """Replace every known secret value in a record before any handler formats it."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        # longest first, so a secret containing another is masked whole
        self.secrets = sorted(
            {s for s in secrets if len(s) >= MIN_SECRET_LEN}, key=len, reverse=True
        )

    def mask(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        for secret in self.secrets:
            text = _mask_cut_tail(_mask_cut_head(text, secret), secret)
        return mask_url_credentials(text)  # a URL's password, however short or unknown

    def _mask_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.mask(value)
        if isinstance(value, bytes | bytearray):
            return self.mask(bytes(value).decode("utf-8", "replace"))
        if isinstance(value, int | float | bool) or value is None:
            return value
        if isinstance(value, Mapping | list | tuple | set):
            # masked leaf by leaf before dumping: json.dumps escapes a secret holding a quote,
            # a backslash or a non-ASCII letter, so it would no longer be found in the text
            # (and a reader's JSON decoder would turn the escapes back into the secret)
            return self.mask(json.dumps(self._masked_tree(value)))
        return self.mask(str(value))

    def _masked_tree(self, value: Any) -> Any:
        """``value`` with every string in it (a table's keys too) masked, as JSON data."""
        if isinstance(value, str | bytes | bytearray):
            return self._mask_value(value)
        if isinstance(value, int | float | bool) or value is None:
            return value
        if isinstance(value, Mapping):
            # a key JSON takes as it is (str, number, None), else as masked text
            return {self._mask_value(k): self._masked_tree(v) for k, v in value.items()}
        if isinstance(value, list | tuple | set):
            return [self._masked_tree(item) for item in value]
        return self.mask(str(value))

    def filter(self, record: logging.LogRecord) -> bool:
        _freeze(record)  # the masked text is what gets printed
        record.msg = self.mask(record.msg)
        for key, value in extra_fields(record).items():
            try:
                masked = self._mask_value(value)
            except Exception:  # no text (a str() that raises, a list holding itself): a
                # raise here would end the writer thread, and every later line with it
                masked = f"<unprintable {type(value).__name__}>"
            setattr(record, key, masked)
        if record.exc_text:
            record.exc_text = self.mask(record.exc_text)
        if record.stack_info:
            record.stack_info = self.mask(record.stack_info)
        return True


def _mask_cut_head(text: str, secret: str) -> str:
    """``text`` with the beginning of ``secret`` masked where it ends a line: what a length
    cap applied before masking (a run's stderr line) kept of it."""
    head = secret[:MIN_SECRET_LEN]
    start = text.find(head)
    while start != -1:
        end = text.find("\n", start)
        end = len(text) if end == -1 else end
        if secret.startswith(text[start:end]):
            text = text[:start] + MASK + text[end:]
            start = text.find(head, start + len(MASK))
        else:
            start = text.find(head, start + 1)
    return text


def _mask_cut_tail(text: str, secret: str) -> str:
    """``text`` with the end of ``secret`` masked where it starts a line: what a cap keeping
    the end of a text (the last lines a run wrote) kept of it."""
    tail = secret[-MIN_SECRET_LEN:]
    found = text.find(tail)
    while found != -1:
        begin = text.rfind("\n", 0, found) + 1
        stop = found + len(tail)
        if secret.endswith(text[begin:stop]):
            text = text[:begin] + MASK + text[stop:]
            found = text.find(tail, begin + len(MASK))
        else:
            found = text.find(tail, found + 1)
    return text


def secret_values(settings: BaseModel | None, environ: Mapping[str, str] | None = None) -> set[str]:
    """Every secret the settings hold (all sections): each ``SecretStr``, every value of a
    :data:`SECRET_VALUES` field, the credentials of each URL; and from the environment the
    values of secret-looking names and the credentials of URLs (a proxy's password)."""
    found: set[str] = set()

    def walk(value: Any, secret: bool = False) -> None:
        if isinstance(value, SecretStr):
            found.add(value.get_secret_value())
        elif isinstance(value, str):
            if secret:
                found.add(value)
            found.update(url_secrets(value))
        elif isinstance(value, BaseModel):
            for name, info in type(value).model_fields.items():
                walk(getattr(value, name, None), secret or is_secret_field(info))
        elif isinstance(value, Mapping):
            for item in value.values():
                walk(item, secret)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item, secret)

    if settings is not None:
        walk(settings)
    env = os.environ if environ is None else environ
    for name, value in env.items():
        if is_secret_env_name(name):
            found.add(value)
        found.update(url_secrets(value))
    return {s for s in found if len(s) >= MIN_SECRET_LEN}


def is_secret_env_name(name: str) -> bool:
    """Whether an environment variable's name says its value is a secret."""
    upper = name.upper()
    return upper.endswith(SECRET_ENV_SUFFIX) or any(hint in upper for hint in SECRET_ENV_HINTS)


def is_terminal(stream: IO[str] | Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def formatter_for(fmt: LogFormat, stream: IO[str] | Any | None) -> logging.Formatter:
    """JSON or text; ``auto`` means text on a terminal and JSON elsewhere (files included)."""
    if fmt == "json" or (fmt == "auto" and (stream is None or not is_terminal(stream))):
        return JsonFormatter()
    return TextFormatter()


_masker: SecretMasker | None = None  # the one install() made last


def mask(text: str) -> str:
    """``text`` with every configured secret masked, as log lines are (for what is written
    to stderr outside logging, e.g. the CLI's last error line)."""
    return _masker.mask(text) if _masker is not None else text


def install(
    handlers: Iterable[logging.Handler],
    *,
    fmt: LogFormat = "auto",
    settings: BaseModel | None = None,
    environ: Mapping[str, str] | None = None,
) -> SecretMasker:
    """Give each handler its formatter and the secret masker; returns the masker."""
    global _masker
    masker = _masker = SecretMasker(secret_values(settings, environ))
    for handler in handlers:
        stream = getattr(handler, "stream", None)
        if isinstance(handler, logging.FileHandler):
            stream = None  # a file is never a terminal: JSON under "auto"
        handler.setFormatter(formatter_for(fmt, stream))
        for old in [f for f in handler.filters if isinstance(f, SecretMasker)]:
            handler.removeFilter(old)
        handler.addFilter(masker)
    return masker


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


class _Frozen(logging.handlers.QueueHandler):
    """Queues records as they are: the message and any traceback turned to text first (the
    arguments may change after the call; a traceback holds the caller's frames), not
    formatted (the writer's handlers do that, each with its own formatter and masker)."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        record = copy.copy(record)  # other handlers (a test's capture) see the caller's own
        _freeze(record)
        return record


def _freeze(record: logging.LogRecord) -> None:
    """The message and any traceback of ``record`` as text, its arguments and exc_info gone."""
    try:
        record.msg = record.getMessage()
    except Exception:  # a bad format string: keep the raw parts
        record.msg = f"{record.msg} {record.args}"
    record.args = None
    if record.exc_info:
        if not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.exc_info = None


_writer: logging.handlers.QueueListener | None = None


def off_thread(handlers: Iterable[logging.Handler]) -> logging.Handler:
    """One handler that queues records for ``handlers``, which a writer thread runs.

    Replaces the writer of an earlier call (after it wrote what it had queued).
    """
    global _writer
    stop_writer()
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    _writer = logging.handlers.QueueListener(records, *handlers, respect_handler_level=True)
    _writer.start()
    return _Frozen(records)


def stop_writer() -> None:
    """Write every queued record, then stop the writer thread (at exit, or before a new one)."""
    global _writer
    writer, _writer = _writer, None
    if writer is not None:
        writer.stop()


atexit.register(stop_writer)  # after logging's own at-exit flush is registered: runs first
