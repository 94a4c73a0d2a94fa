"""Showing a run's progress on a surface, picked from what the surface can do.

A surface that edits gets one bubble (with a Stop button where it has buttons), edited at
most once per its edit interval and closed with the summary; one that can't edit gets an
occasional "still working" line. Nothing at all is shown for a run that answers within
``first_after_s``. The typing indicator is renewed while the run works.

The bubble is posted at most once. A send that failed without a refusal (a timeout, a
reset connection, a 5xx) may have landed all the same, with its answer lost: the bubble
may be in the chat under an id the gateway never learns. It is not posted again on a guess:
a surface that can look a message up by its reply key (``confirm_delivery``) is asked
first and the bubble it finds is adopted; elsewhere (Telegram) the run goes on without a
bubble, and its answer carries the summary line, as for a run with no bubble at all. A
refusal (rate limited) posted nothing and is tried again; a permanent one is not retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from ..config import ProgressSettings
from ..model import Choice, Outgoing, ReplyKind, ReplyTarget
from ..ports import ConfirmsDelivery, DeliveryError, Surface
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
        self.no_bubble = False  # given up: refused for good, or may have landed unseen
        self._in_doubt = False  # a send may have landed: looked up before any other send
        self.done = asyncio.Event()
        # until first_after_s: a timer only (most runs answer sooner: no task, no bubble)
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Show the run's progress from ``first_after_s`` on, until :meth:`finish`."""
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.settings.first_after_s, self._begin)

    def _begin(self) -> None:
        self._timer = None
        if not self.done.is_set():
            self._task = asyncio.create_task(self.run(), name=f"progress-{self.run_id}")

    async def finish(self) -> None:
        """The run is over: no more progress; returns once an update under way is done."""
        self.done.set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def run(self) -> None:
        """Show progress now, until :meth:`finish` (:meth:`start` calls it when it is time)."""
        caps = self.surface.capabilities
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
                    if self.no_bubble:
                        pass  # the answer carries the summary; typing still shows the work
                    elif self.bubble_ref is None:
                        # one found by its key shows an older line: edited at the next turn
                        shown = line if await self._post(out) else ""
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

    async def _post(self, out: Outgoing) -> bool:
        """Show the bubble: True once ``out`` is sent, False when an earlier send is found
        to have landed (adopted as the bubble). Raises when it is not shown (yet)."""
        key = f"progress:{self.run_id}"
        if self._in_doubt:
            assert isinstance(self.surface, ConfirmsDelivery)
            found = await self.surface.find_sent(self.target, key)  # raises: asked again later
            self._in_doubt = False
            if found is not None:
                log.info("progress bubble of run %d had landed (%s): adopted", self.run_id, found)
                self.bubble_ref = found
                return False
        try:
            self.bubble_ref = await self.surface.send(self.target, out, reply_key=key)
        except DeliveryError as exc:
            if exc.permanent:
                self.no_bubble = True
                log.info("progress bubble of run %d refused (%s): none shown", self.run_id, exc)
            elif not exc.retry_after:
                self._unclear(exc)
            raise
        except OSError as exc:
            self._unclear(exc)
            raise
        return True

    def _unclear(self, exc: Exception) -> None:
        """The bubble's send failed in a way that may have posted it."""
        surface = self.surface
        if surface.capabilities.confirm_delivery and isinstance(surface, ConfirmsDelivery):
            self._in_doubt = True
            return
        self.no_bubble = True
        log.warning(
            "progress bubble of run %d may have been posted without its answer (%s): not sent "
            "again, the run's answer carries its summary",
            self.run_id,
            exc,
        )

    async def close(self, summary: str) -> bool:
        """Turn the bubble (if one was shown) into the turn's summary line; whether it is."""
        if self.bubble_ref is None:
            return False
        try:
            await self.surface.edit(
                self.target, self.bubble_ref, Outgoing(ReplyKind.NOTICE, summary)
            )
        except (DeliveryError, OSError):
            return False
        return True
