"""The recent events of the web chat's threads, so a reconnected event stream resumes.

A browser's EventSource reconnects by itself after a network blip and sends the id of the
last event it got (``Last-Event-ID``); without ids, whatever the gateway sent meanwhile (an
answer, a prompt) never reached that stream. Each event gets an id (this process's boot
id and a sequence number), a few recent events per thread are kept, and a stream that
resumes gets those after its id, once. When they are no longer all kept (too old, from an
earlier process, a thread forgotten to bound memory) the stream is told so instead (a
``gap``: read ``GET .../messages`` again), never silently left short.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

REPLAY_EVENTS = 64  # events kept per thread (a bubble's edits count once: the newest)
REPLAY_THREADS = 256  # threads whose events are kept, the most recently active
MAX_SEQ_DIGITS = 20  # an id's number longer than this is not one of ours
Event = dict[str, Any]


@dataclass
class _Kept:
    events: deque[tuple[int, Event]] = field(default_factory=deque)
    lost_upto: int = 0  # the newest sequence number of this thread no longer kept


class EventLog:
    def __init__(self) -> None:
        self.boot = uuid.uuid4().hex[:12]
        self._seq = 0
        self._threads: OrderedDict[str, _Kept] = OrderedDict()
        # events of any thread up to this number may have been forgotten with their thread
        self._forgotten_upto = 0

    def current_id(self) -> str:
        """The id a stream that has seen nothing yet resumes from."""
        return self._id(self._seq)

    def add(self, thread: str, event: Event) -> Event:
        """``event`` with its id, kept for ``thread``'s streams that resume."""
        self._seq += 1
        event = {**event, "id": self._id(self._seq)}
        kept = self._kept(thread)
        if event.get("type") == "edit":  # an older edit of the same bubble is superseded
            kept.events = deque((s, e) for s, e in kept.events if not _same_edit(e, event))
        if len(kept.events) >= REPLAY_EVENTS:
            kept.lost_upto = kept.events.popleft()[0]
        kept.events.append((self._seq, event))
        return event

    def since(self, thread: str, last_id: str) -> list[Event] | None:
        """The events of ``thread`` after ``last_id``; None when some are no longer kept."""
        boot, _, number = last_id.strip().rpartition("-")
        ours = number.isascii() and number.isdigit() and len(number) <= MAX_SEQ_DIGITS
        if boot != self.boot or not ours:
            return None  # another process's id (or not one of ours): what it missed is gone
        last = int(number)
        if last > self._seq:
            return None
        kept = self._threads.get(thread)
        lost = kept.lost_upto if kept is not None else self._forgotten_upto
        if last < lost:
            return None
        return [e for s, e in kept.events if s > last] if kept is not None else []

    def _id(self, seq: int) -> str:
        return f"{self.boot}-{seq}"

    def _kept(self, thread: str) -> _Kept:
        kept = self._threads.get(thread)
        if kept is None:
            kept = self._threads[thread] = _Kept(lost_upto=self._forgotten_upto)
        self._threads.move_to_end(thread)
        while len(self._threads) > REPLAY_THREADS:
            self._threads.popitem(last=False)
            self._forgotten_upto = self._seq
        return kept


def _same_edit(kept: Event, new: Event) -> bool:
    return kept.get("type") == "edit" and kept.get("ref") == new.get("ref")
