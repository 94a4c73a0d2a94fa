"""The ``--timeout`` clock, which pauses while a person is asked something.

Why it exists: the contract counts only the runner's own time against ``--timeout``; a
person may take minutes over an approval. The watchdog reads this clock, the prompts for a
person pause and resume it (several may be pending at once).
"""

from __future__ import annotations

import threading
import time


class Clock:
    """Active time since the start, not counting the spans while any prompt is pending."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0.0
        self._since: float | None = time.monotonic()
        self._waiting = 0

    def pause(self) -> None:
        with self._lock:
            self._waiting += 1
            if self._since is not None:
                self._active += time.monotonic() - self._since
                self._since = None

    def resume(self) -> None:
        with self._lock:
            self._waiting = max(0, self._waiting - 1)
            if self._waiting == 0 and self._since is None:
                self._since = time.monotonic()

    def active(self) -> float:
        with self._lock:
            running = time.monotonic() - self._since if self._since is not None else 0.0
            return self._active + running
