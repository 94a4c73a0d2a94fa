"""Writes that must land: a store that cannot write (a full disk, a lock held too long) is
waited out with a growing pause instead of losing what an acknowledged message is owed.

A :class:`~bridge.store.base.StoreUnavailable` means the write was not made (each write is
one transaction) and may be made later, so trying the same write again is safe. Any other
store error (a row that is not there) would fail the same way forever, holding whatever
its caller holds: it is raised at once. The turn engine and the deliverer share one
:class:`StoreRetry`; when the gateway stops it gives up at the next failure and leaves the
state as the store has it, which the next start recovers from.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .base import StoreError, StoreUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_FIRST_S = 0.5  # the first pause after a write failed
RETRY_MAX_S = 5.0  # the longest pause between tries


class StoreRetry:
    """Runs a store operation until it succeeds or the gateway stops (see the module)."""

    def __init__(self, first_s: float = RETRY_FIRST_S, max_s: float = RETRY_MAX_S) -> None:
        self.first_s = first_s
        self.max_s = max_s
        self.stopped = asyncio.Event()  # ends a pause early and ends the retrying

    def stop(self) -> None:
        self.stopped.set()

    async def pause(self, seconds: float) -> None:
        """A backoff that ends early when the gateway stops."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopped.wait(), seconds)

    async def run(self, operation: Callable[[], Awaitable[T]], what: str) -> T | None:
        """``operation()``'s result, tried again on a StoreUnavailable after a pause growing
        from ``first_s`` to ``max_s``; None when the gateway stopped before it succeeded."""
        pause = self.first_s
        while True:
            try:
                return await operation()
            except StoreError as exc:
                if self.stopped.is_set():
                    log.error("%s: not written, the gateway is stopping (%s)", what, exc)
                    return None
                if not isinstance(exc, StoreUnavailable):
                    raise  # the same write would fail again: no point holding on
                log.warning(
                    "%s: the store cannot write (%s); trying again in %.1fs", what, exc, pause
                )
            await self.pause(pause)
            pause = min(pause * 2, self.max_s)
