"""Writing log lines on a thread of their own, so a blocked write never stops the event loop.

Writing is a thread's job (:func:`off_thread`): a log line is a blocking write to a file or
a pipe (journald, a container runtime), and one that blocks (a full pipe, a slow disk) would
stop the event loop with it. Callers only queue the record; a writer thread masks, formats
and writes it; what is queued is written at exit (:func:`stop_writer`).
"""

from __future__ import annotations

import atexit
import copy
import logging
import logging.handlers
import queue
from collections.abc import Iterable

from .records import freeze


class _Frozen(logging.handlers.QueueHandler):
    """Queues records as they are: the message and any traceback turned to text first (the
    arguments may change after the call; a traceback holds the caller's frames), not
    formatted (the writer's handlers do that, each with its own formatter and masker)."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        record = copy.copy(record)  # other handlers (a test's capture) see the caller's own
        freeze(record)
        return record


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
