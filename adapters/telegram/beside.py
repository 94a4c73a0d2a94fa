"""The Telegram adapter's calls made beside the core, waited for (briefly) at shutdown.

Two things the adapter says on Telegram are not the core's replies, so no delivery queue
holds them: the edit of a message whose button was pressed in a polled batch
(:mod:`.presses`: the rest of the batch must not wait for it) and the word to a sender
whose message the core does not take (:mod:`.intake`). Each runs as a tracked task here,
so that shutdown lets them finish while the bot's connection is still open.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

SETTLE_GRACE_S = 1.0  # at shutdown, for the edits of pressed messages still under way


class Beside:
    """The tasks under way beside the core."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def run(self, call: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(call, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Let them finish for :data:`SETTLE_GRACE_S`, then cancel what is left."""
        if self._tasks:  # they need the bot's connection too
            await asyncio.wait(self._tasks, timeout=SETTLE_GRACE_S)
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
