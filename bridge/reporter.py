"""Showing a run's progress on a surface, picked from what the surface can do.

A surface that edits gets one bubble (with a Stop button where it has buttons), edited at
most once per its edit interval and closed with the summary; one that can't edit gets an
occasional "still working" line. Nothing at all is shown for a run that answers within
``first_after_s``. The typing indicator is renewed while the run works.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from .config import ProgressSettings
from .model import Choice, Outgoing, ReplyKind, ReplyTarget
from .ports import DeliveryError, Surface
from .progress import ProgressState

log = logging.getLogger(__name__)

TYPING_EVERY_S = 4.0


class ProgressReporter:
    def __init__(
        self,
        surface: Surface,
        target: ReplyTarget,
        state: ProgressState,
        settings: ProgressSettings,
        *,
        run_id: int,
        requester: str,
        stop_token: str,
    ) -> None:
        self.surface = surface
        self.target = target
        self.state = state
        self.settings = settings
        self.run_id = run_id
        self.requester = requester
        self.stop_token = stop_token
        self.bubble_ref: str | None = None
        self.done = asyncio.Event()

    async def run(self) -> None:
        """Until :meth:`finish` is called."""
        caps = self.surface.capabilities
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.done.wait(), timeout=self.settings.first_after_s)
            return  # answered quickly: no bubble at all
        stop = (
            (Choice(token=self.stop_token, label="Stop", style="danger"),) if caps.buttons else ()
        )
        shown = ""
        last_line_at = time.monotonic()
        last_typing = 0.0
        interval = max(caps.edit_interval_s, 0.2)
        while not self.done.is_set():
            now = time.monotonic()
            try:
                # no "typing…" while the agent waits for the person: it is their turn
                if caps.typing and not self.state.waiting and now - last_typing >= TYPING_EVERY_S:
                    last_typing = now
                    await self.surface.typing(self.target)
                line = self.state.line()
                if caps.edit:
                    out = Outgoing(ReplyKind.NOTICE, line, choices=stop, requester=self.requester)
                    if self.bubble_ref is None:
                        self.bubble_ref = await self.surface.send(
                            self.target, out, reply_key=f"progress:{self.run_id}"
                        )
                        shown = line
                    elif line != shown:  # elapsed time moves it at most once a second
                        await self.surface.edit(self.target, self.bubble_ref, out)
                        shown = line
                elif now - last_line_at >= self.settings.still_working_every_s:
                    last_line_at = now
                    await self.surface.send(
                        self.target,
                        Outgoing(ReplyKind.NOTICE, f"Still working… {line}"),
                        reply_key=f"still:{self.run_id}:{int(now)}",
                    )
            except (DeliveryError, OSError) as exc:
                log.info("progress update dropped: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.done.wait(), timeout=interval)

    async def close(self, summary: str) -> None:
        """Turn the bubble (if one was shown) into the turn's summary line."""
        if self.bubble_ref is None:
            return
        with contextlib.suppress(DeliveryError, OSError):
            await self.surface.edit(
                self.target, self.bubble_ref, Outgoing(ReplyKind.NOTICE, summary)
            )
