"""How the gateway's log lines look, and the guarantee that no secret reaches them.

A service's log is read by machines (journald, a collector) and by people at a terminal, so
the format follows where it goes: one JSON object per line when the stream is not a
terminal (or ``log.format = "json"``), a readable line on a terminal (or ``"text"``).
Fields passed as ``extra={...}`` become JSON keys (``key=value`` in text), so a turn's line
carries its thread key, outcome and duration as data, not prose.

:class:`SecretMasker` sits on every handler and replaces the value of every configured
secret (each ``SecretStr`` in the settings, adapter sections included) and of secret-looking
environment variables wherever it appears: the message, its arguments, extra fields and
tracebacks. A Telegram token inside a URL an HTTP library logs is masked like any other.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import IO, Any, Literal

from pydantic import BaseModel, SecretStr

LogFormat = Literal["auto", "json", "text"]

MASK = "***"
# Shorter values would mask ordinary words; real tokens and secrets are far longer.
MIN_SECRET_LEN = 6
# Environment variables whose values are treated as secrets (names upper-cased).
SECRET_ENV_HINTS = ("TOKEN", "SECRET", "PASSWORD", "API_KEY", "ACCESS_KEY")
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
        return text

    def _mask_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.mask(value)
        if isinstance(value, bytes | bytearray):
            return self.mask(bytes(value).decode("utf-8", "replace"))
        if isinstance(value, int | float | bool) or value is None:
            return value
        if isinstance(value, Mapping | list | tuple | set):
            return self.mask(json.dumps(value, default=str))
        return self.mask(str(value))

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: keep the raw parts, masked
            message = f"{record.msg} {record.args}"
        record.msg, record.args = self.mask(message), None
        for key, value in extra_fields(record).items():
            setattr(record, key, self._mask_value(value))
        if record.exc_info:
            if not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None  # the masked text is what gets printed
        if record.exc_text:
            record.exc_text = self.mask(record.exc_text)
        if record.stack_info:
            record.stack_info = self.mask(record.stack_info)
        return True


def secret_values(settings: BaseModel | None, environ: Mapping[str, str] | None = None) -> set[str]:
    """Every ``SecretStr`` value in the settings (all sections) and secret-looking env values."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, SecretStr):
            found.add(value.get_secret_value())
        elif isinstance(value, BaseModel):
            for name in type(value).model_fields:
                walk(getattr(value, name, None))
        elif isinstance(value, Mapping):
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    if settings is not None:
        walk(settings)
    env = os.environ if environ is None else environ
    for name, value in env.items():
        if any(hint in name.upper() for hint in SECRET_ENV_HINTS):
            found.add(value)
    return {s for s in found if len(s) >= MIN_SECRET_LEN}


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


def install(
    handlers: Iterable[logging.Handler],
    *,
    fmt: LogFormat = "auto",
    settings: BaseModel | None = None,
    environ: Mapping[str, str] | None = None,
) -> SecretMasker:
    """Give each handler its formatter and the secret masker; returns the masker."""
    masker = SecretMasker(secret_values(settings, environ))
    for handler in handlers:
        stream = getattr(handler, "stream", None)
        if isinstance(handler, logging.FileHandler):
            stream = None  # a file is never a terminal: JSON under "auto"
        handler.setFormatter(formatter_for(fmt, stream))
        for old in [f for f in handler.filters if isinstance(f, SecretMasker)]:
            handler.removeFilter(old)
        handler.addFilter(masker)
    return masker
