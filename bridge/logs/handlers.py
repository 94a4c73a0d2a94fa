"""Putting the log's pieces on the handlers: each one's format and the one secret masker.

``serve`` and the other commands hand their handlers (stderr, the log file) to
:func:`install`, which gives each the format that suits where it writes and the masker built
from the settings and the environment; :func:`mask` then masks what is written outside
logging with the same secrets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from pydantic import BaseModel

from .formats import LogFormat, formatter_for
from .masking import SecretMasker, secret_values

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
