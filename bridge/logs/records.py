"""What a log record carries beyond logging's own attributes, and its message as text.

Both the formatters (which show the ``extra={...}`` fields) and the secret masker (which
masks them, and the message once it is text) need to tell a caller's fields from logging's,
and the writer thread's queue and the masker both turn a record's message and traceback into
text before anything else sees it; so that lives here, below all of them.
"""

from __future__ import annotations

import logging
from typing import Any

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


def freeze(record: logging.LogRecord) -> None:
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
