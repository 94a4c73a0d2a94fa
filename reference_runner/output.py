"""stdout and stderr: the NDJSON events a run asked for, and its one envelope.

Why it exists: events come from the turn, from the thread reading stdin, from the timeout
watchdog and from signal handlers, and the envelope must be the last line of stdout,
printed once even when a signal or the timeout cuts in; one writer with one lock keeps
every line whole and the envelope single.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from .contract import ALWAYS, CATEGORIES


class Output:
    """stdout and stderr, one writer at a time, and at most one envelope."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.categories: set[str] = set()
        self.envelope_written = False

    def event(self, type_: str, **data: Any) -> None:
        if type_ in ALWAYS or any(type_ in CATEGORIES[c] for c in self.categories):
            self.stderr(json.dumps({"type": type_, **data}))

    def stderr(self, line: str) -> None:
        with self.lock:
            try:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass

    def stdout_bytes(self, data: bytes) -> None:
        with self.lock:
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()

    def envelope(self, env: dict[str, Any], *, fresh_line: bool = False) -> bool:
        """Print the envelope unless one was printed; False if it was."""
        with self.lock:
            if self.envelope_written:
                return False
            self.envelope_written = True
            # a signal or the timeout may cut in between two writes of other output
            text = ("\n" if fresh_line else "") + json.dumps(env) + "\n"
            try:
                sys.stdout.write(text)
                sys.stdout.flush()
            except (OSError, ValueError):
                pass
            return True


def bare_failure(message: str, code: str = "failed") -> dict[str, Any]:
    """A failure envelope for a run that never started (bad flags): nothing spent."""
    return {
        "ok": False,
        "code": code,
        "error": message,
        "costUSD": 0.0,
        "costKnown": False,
        "tokenUsage": {"promptTokens": 0, "completionTokens": 0, "totalTokens": 0},
        "toolCalls": [],
        "artifacts": [],
    }
