"""A run's own clock: the time that counts against its timeout, paused while a person is asked.

Both backends time a run the same way (the runner's own ``--timeout`` would count the time
someone takes to answer a prompt): this is that clock, kept apart from each handle's
streams or polling so the two cannot drift.
"""

from __future__ import annotations

import time


class ActiveClock:
    """Seconds a run has worked, not counting the pauses; running from its creation."""

    def __init__(self) -> None:
        self._active_s = 0.0  # run time not spent waiting for a person
        self._since: float | None = time.monotonic()

    @property
    def running(self) -> bool:
        return self._since is not None

    def pause(self) -> None:
        if self._since is not None:
            self._active_s += time.monotonic() - self._since
            self._since = None

    def resume(self) -> None:
        if self._since is None:
            self._since = time.monotonic()

    def seconds(self) -> float:
        running = time.monotonic() - self._since if self._since else 0.0
        return self._active_s + running


class PromptClock(ActiveClock):
    """An :class:`ActiveClock` paused while any prompt it was told of waits for a person."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: set[str] = set()  # prompt ids waiting for a person

    def ask(self, ident: str) -> None:
        """The prompt ``ident`` waits for a person: the clock stops."""
        self.pending.add(ident)
        self.pause()

    def settle(self, ident: str) -> None:
        """The prompt ``ident`` waits no more: the clock runs once no other prompt waits."""
        self.pending.discard(ident)
        self.resume()

    def resume(self) -> None:
        if not self.pending:
            super().resume()
