"""What a command writes: its lines and JSON on stdout, and the log handlers it logs through.

Shared by every command module, so each prints and logs the same way (stdout flushed line by
line for scripts reading it; the gateway's log configuration, secrets masked).
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from .. import logs
from ..config import CoreSettings


def out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def dump(data: Any) -> None:
    out(json.dumps(data, indent=2, sort_keys=True, default=str))


def setup_logging(
    settings: CoreSettings | None, level: str | None = None, *, writer_thread: bool = False
) -> None:
    """Log handlers as configured. ``writer_thread`` (``serve``): lines are written by a
    thread of their own, so a write that blocks never stops the event loop; one-shot
    commands write in place, so their lines and errors keep their order."""
    chosen = level or (settings.log.level if settings else "INFO")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if settings is not None and settings.log.file is not None:
        try:
            settings.log.file.parent.mkdir(parents=True, exist_ok=True)
            handlers.append(
                logs.CappedFileHandler(  # capped with log.backups = 0 as well
                    settings.log.file,
                    maxBytes=settings.log.max_bytes,
                    backupCount=settings.log.backups,
                    encoding="utf-8",
                )
            )
        except OSError as exc:  # an operator's command must not fail on the gateway's log
            sys.stderr.write(f"jazz-bridge: warning: not logging to {settings.log.file}: {exc}\n")
    # JSON lines unless on a terminal (log.format), every configured secret masked
    logs.install(handlers, fmt=settings.log.format if settings else "auto", settings=settings)
    if writer_thread:
        handlers = [logs.off_thread(handlers)]
    else:
        logs.stop_writer()  # an earlier set-up's thread, if any
    logging.basicConfig(level=chosen, handlers=handlers, force=True)
