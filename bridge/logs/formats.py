"""How a log line looks: one JSON object per line for machines, a readable line for people.

A service's log is read by machines (journald, a collector) and by people at a terminal, so
the format follows where it goes: one JSON object per line when the stream is not a
terminal (or ``log.format = "json"``), a readable line on a terminal (or ``"text"``).
Fields passed as ``extra={...}`` become JSON keys (``key=value`` in text), so a turn's line
carries its thread key, outcome and duration as data, not prose.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import IO, Any, Literal

from .records import extra_fields

LogFormat = Literal["auto", "json", "text"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


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
