"""Edits of posted messages (a run's progress bubble, its summary, an answered prompt),
sent within the workspace's chat.update budget.

Each run's bubble is paced on its own (``edit_interval_s``), but a few long runs at once in
one workspace would together go over Slack's budget, and draw 429s. An edit the budget (or
a 429) refuses is held: the newest one per message is sent once the workspace's budget
allows, so a bubble still shows its latest state, and ends on the run's summary. An edit
that takes a message's buttons away settles it (a summary, an answered prompt): it goes
before every held progress refresh of its workspace, which a newer one replaces anyway.
Edits of one message go one at a time, newest last. Apart from the surface because this
holding, ordering and flushing is a job of its own, with its own state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

from slack_sdk.web.async_client import AsyncWebClient

from bridge.model import Outgoing
from bridge.ports import DeliveryError

from .blocks import blocks_for
from .errors import CALL_ERRORS, slack_error
from .ratelimit import RateLimits
from .targets import split_ref
from .text import _mrkdwn

log = logging.getLogger(__name__)

MAX_EDIT_STATE = 2000  # messages whose edit order is tracked; idle ones are forgotten past this
CLOSE_FLUSH_S = 5.0  # held edits still being sent when the surface closes get this long
# an edit that settles a message (a summary, an answered prompt) and failed without a
# refusal (a 5xx, a dropped connection) is tried again this many times, the first after
# EDIT_RETRY_S, doubling: an edit sets the same content however often it lands
EDIT_RETRIES = 4
EDIT_RETRY_S = 1.0


def settles(message: Outgoing) -> bool:
    """Is this edit a message's last word? One that leaves no buttons settles it (a run's
    summary, an answered prompt); one with buttons is a live bubble's progress refresh,
    which a newer one replaces."""
    return not message.choices


@dataclass
class HeldEdit:
    """The newest edit of one message that could not be sent yet."""

    team: str
    message: Outgoing
    seq: int
    since: float  # when the message first had an edit held: its place in the queue
    tries: int = 0  # passing failures of this edit so far (see EDIT_RETRIES)
    ready_at: float = 0.0  # monotonic time before which it is not tried again

    @property
    def rank(self) -> tuple[bool, float]:
        """The flush order: edits that settle a message first, then the longest held."""
        return (not settles(self.message), self.since)


class Edits:
    """The chat.update calls of one surface: sent now, or held for the workspace's flusher."""

    def __init__(self, client: AsyncWebClient, limits: RateLimits) -> None:
        self.client = client
        self._limits = limits
        self._held_edits: dict[str, HeldEdit] = {}  # ref -> its newest edit not sent yet
        self._flushers: dict[str, asyncio.Task[None]] = {}  # team -> sender of its held edits
        # chat.update of one message, one at a time and newest last: a held progress edit
        # in flight must not land after the summary that replaced it
        self._edit_locks: dict[str, asyncio.Lock] = {}
        self._edit_seq: dict[str, int] = {}
        # ref -> edits of it between taking a seq number and their end (sent, held, failed):
        # the clean-out of idle messages keeps their order and lock
        self._open_edits: dict[str, int] = {}
        self._landed: dict[str, Outgoing] = {}  # ref -> what its last edit showed

    async def edit(self, team: str, ref: str, message: Outgoing) -> None:
        """Edit now if the workspace's budget allows and nothing of it waits that goes
        first; else hold the edit (the newest per message wins) and raise
        :class:`DeliveryError` with ``retry_after``: the workspace's flusher sends it."""
        with self._editing(ref):
            seq = self._edit_seq[ref] = self._edit_seq.get(ref, 0) + 1
            try:
                if self._queued_ahead(team, ref, message):
                    pace = 1.0 / self._limits.budget(team).rate
                    wait = max(self._limits.wait("chat.update", team), pace)
                    raise DeliveryError("chat.update: queued behind held edits", retry_after=wait)
                await self._update(team, ref, message, seq)
            except DeliveryError as exc:
                if exc.retry_after:
                    self._hold(team, ref, message, seq)
                    raise
                retry = self._retry_of(HeldEdit(team, message, seq, time.monotonic()), exc)
                if retry is None:
                    raise
                self._hold(team, ref, message, seq, retry)
                raise DeliveryError(
                    f"{exc}; tried again in {EDIT_RETRY_S:g}s", retry_after=EDIT_RETRY_S
                ) from exc

    async def settle(self, team: str, ref: str, message: Outgoing) -> None:
        """Edit a message a button press found stale (its run is over), unless an edit of
        it is held or under way: that one is newer (the run's summary, which drops the
        buttons itself) and is not replaced."""
        if ref in self._held_edits or ref in self._open_edits:
            log.debug("slack: stale press on %s left to the edit already coming", ref)
            return
        await self.edit(team, ref, message)

    async def _update(self, team: str, ref: str, message: Outgoing, seq: int) -> None:
        channel, ts = split_ref(ref)
        async with self._edit_lock(ref):
            if self._edit_seq.get(ref, 0) != seq:
                return  # a newer edit of this message was made meanwhile: this one is stale
            if self._landed.get(ref) == message:  # shown already: no call spent on it
                self._held_edits.pop(ref, None)
                return
            self._limits.gate("chat.update", team)
            self._held_edits.pop(ref, None)  # this newer edit replaces a held one
            self._landed.pop(ref, None)  # a failed edit may have landed all the same
            try:
                await self.client.chat_update(
                    channel=channel,
                    ts=ts,
                    text=_mrkdwn(message.text or " "),
                    blocks=blocks_for(message),
                )
            except CALL_ERRORS as exc:
                self._limits.note("chat.update", team, exc)
                raise slack_error(exc, "chat.update") from exc
            self._landed[ref] = message

    def _edit_lock(self, ref: str) -> asyncio.Lock:
        return self._edit_locks.setdefault(ref, asyncio.Lock())

    @contextlib.contextmanager
    def _editing(self, ref: str) -> Iterator[None]:
        """An edit of ``ref`` is open from its seq number to its end (sent, held, failed).
        The clean-out runs after it, not before: forgetting the seq of an edit still to be
        made would make :meth:`_update` take it for a stale one and drop it silently."""
        self._open_edits[ref] = self._open_edits.get(ref, 0) + 1
        try:
            yield
        finally:
            left = self._open_edits.pop(ref) - 1
            if left:
                self._open_edits[ref] = left
            self._forget_idle_edits()

    def _forget_idle_edits(self) -> None:
        """Past MAX_EDIT_STATE messages, forget those no edit is using: none open (which
        covers one waiting for the lock, even in the moment after a release when the lock
        reads unlocked) and none held for the flusher."""
        if len(self._edit_seq) <= MAX_EDIT_STATE:
            return
        busy = self._open_edits.keys() | self._held_edits.keys()
        idle = [ref for ref in self._edit_seq if ref not in busy]
        for ref in idle:
            del self._edit_seq[ref]
            self._edit_locks.pop(ref, None)
            self._landed.pop(ref, None)
        log.debug("slack: forgot the edit state of %d idle messages", len(idle))

    def _hold(
        self, team: str, ref: str, message: Outgoing, seq: int, retry: HeldEdit | None = None
    ) -> None:
        """Keep the newest edit of ``ref`` for the workspace's flusher to send (``retry``:
        one that failed, with its count of tries and when it may be tried again)."""
        held = self._held_edits.get(ref)
        if held is not None and held.seq > seq:
            return  # a newer edit of this message is held already
        since = held.since if held is not None else time.monotonic()
        self._held_edits[ref] = HeldEdit(
            team,
            message,
            seq,
            since,
            tries=retry.tries if retry is not None else 0,
            ready_at=retry.ready_at if retry is not None else 0.0,
        )
        flusher = self._flushers.get(team)
        if flusher is None or flusher.done():
            self._flushers[team] = asyncio.create_task(
                self._flush_edits(team), name=f"slack-edits-{team}"
            )

    @staticmethod
    def _retry_of(held: HeldEdit, exc: DeliveryError) -> HeldEdit | None:
        """``held`` to be tried again after its passing failure ``exc``, or None: a refusal
        for good, a progress refresh (the next one replaces it), or out of tries."""
        if exc.permanent or exc.retry_after or not settles(held.message):
            return None
        if held.tries >= EDIT_RETRIES:
            return None
        delay = EDIT_RETRY_S * 2.0**held.tries
        log.info("slack: edit failed (%s); trying it again in %.1fs", exc, delay)
        held.tries += 1
        held.ready_at = time.monotonic() + delay
        return held

    def _queued_ahead(self, team: str, ref: str, message: Outgoing) -> bool:
        """Does another message of the workspace have an edit held that goes first? Held
        edits that settle a message go before all progress; among equals, the older first."""
        final = settles(message)
        return any(
            held.team == team and other != ref and (settles(held.message) or not final)
            for other, held in self._held_edits.items()
        )

    async def _flush_edits(self, team: str) -> None:
        """Send the workspace's held edits as its budget and any Retry-After allow."""
        while True:
            queue = [(ref, held) for ref, held in self._held_edits.items() if held.team == team]
            if not queue:
                return
            now = time.monotonic()
            ready = [(ref, held) for ref, held in queue if held.ready_at <= now]
            if not ready:  # only edits waiting to be tried again after a failure
                await asyncio.sleep(min(held.ready_at for _, held in queue) - now)
                continue
            queue = ready
            wait = self._limits.wait("chat.update", team)
            if wait > 0:
                await asyncio.sleep(wait)  # waiting out the budget or a 429, not synchronisation
                continue
            ref, held = min(queue, key=lambda item: item[1].rank)
            with self._editing(ref):
                del self._held_edits[ref]
                try:
                    await self._update(team, ref, held.message, held.seq)
                except DeliveryError as exc:
                    retry = held if exc.retry_after else self._retry_of(held, exc)
                    if retry is not None and ref not in self._held_edits:
                        self._held_edits[ref] = retry  # its place in the queue kept
                    elif retry is None:
                        log.info("slack: held edit dropped: %s", exc)

    async def close(self) -> None:
        """Let held edits go out for a while (summaries among them), then stop sending."""
        pending = [task for task in self._flushers.values() if not task.done()]
        if pending:
            await asyncio.wait(pending, timeout=CLOSE_FLUSH_S)
        flushers = list(self._flushers.values())
        self._flushers.clear()
        for task in flushers:
            task.cancel()
        for result in await asyncio.gather(*flushers, return_exceptions=True):
            if isinstance(result, Exception):
                log.warning("slack: sending held edits failed: %r", result)
