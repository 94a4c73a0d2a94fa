"""Reading one CLI run's output: NDJSON events on stderr, the envelope on stdout.

Both streams are read beside the run, in lines capped at :data:`MAX_LINE`; the events go
to a queue bounded in number and in bytes (a runner that keeps writing while the engine
is busy waits on its full pipe instead of growing the gateway's memory), each released
CLI event put in the documented shape first. What the reading learns for the result
(the envelope, the stderr tail, the provider, a question or approval nobody could take)
is kept on :class:`CliStreams` for :mod:`.cli_result`. Kept apart from the handle
(:mod:`.cli_handle`), which starts, times and stops the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable

from ..logs import mask
from .base import PROMPT_EVENTS, RunnerEvent, RunRequest
from .cli_argv import PromptMode
from .clock import PromptClock
from .dialect import CliProfile, flat_tool_call, needs_person, question_of
from .spawn import Child

log = logging.getLogger(__name__)

STDERR_TAIL = 60  # a provider failure of the released CLI is a ~50-line stack trace
TAIL_LINE_CHARS = 500  # a stderr line kept for the failure reply, cut after its secrets are masked
MAX_LINE = 16 * 1024 * 1024  # an envelope (or event) longer than this is not one
CHUNK = 256 * 1024
MAX_QUEUED_EVENTS = 256  # progress events read ahead of the engine; then the runner waits
# and as many bytes of them (one event up to MAX_LINE always passes): 256 events of up to
# MAX_LINE each would be 4 GiB held for one run whose engine is busy
MAX_QUEUED_BYTES = 16 * 1024 * 1024
# what the released CLI prints on stdout when it is stopped (its only output then)
SHUTDOWN_LINE = re.compile(r"Received SIG[A-Z]+\. Shutting down\.\.\.")
ASK_TOOL = "ask_user_question"  # the released CLI's question tool: it cannot reach a person
TOOL_EVENTS = frozenset({"tool_call", "tool_execution_start"})


class EventQueue:
    """Progress events read ahead of the engine, bounded in number and in bytes."""

    def __init__(self) -> None:
        # bounded: while the engine is busy (showing a prompt), a runner that keeps writing
        # events waits on its full stderr pipe instead of growing the gateway's memory;
        # each event is queued with its size, bounded in sum by MAX_QUEUED_BYTES
        self._queue: asyncio.Queue[tuple[RunnerEvent, int] | None] = asyncio.Queue(
            MAX_QUEUED_EVENTS
        )
        self._queued_bytes = 0
        self._room = asyncio.Event()  # set whenever the engine took an event
        self._ended = False

    async def put(self, event: RunnerEvent, size: int) -> None:
        """Queue ``event`` (``size`` bytes), once the queue has room for it."""
        while self._queued_bytes and self._queued_bytes + size > MAX_QUEUED_BYTES:
            self._room.clear()
            await self._room.wait()
        self._queued_bytes += size
        await self._queue.put((event, size))

    def end(self) -> None:
        """No event comes after those queued."""
        # the end is told even when the queue is full (or the reader is cancelled while it
        # waits for room): drain() also ends once it finds the queue empty after it
        self._ended = True
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(None)

    async def drain(self) -> AsyncIterator[RunnerEvent]:
        """The events in order, until the end."""
        while True:
            if self._ended and self._queue.empty():
                return
            item = await self._queue.get()
            if item is None:
                return
            event, size = item
            self._queued_bytes -= size
            self._room.set()
            yield event


class CliStreams:
    """What one run's stdout and stderr say, read as they come (:meth:`read_stderr`,
    :meth:`read_stdout`, each its own task of the handle)."""

    def __init__(
        self,
        proc: Child,
        request: RunRequest,
        clock: PromptClock,
        *,
        profile: CliProfile,
        prompt_mode: PromptMode,
        default_provider: str | None,
        unanswerable: Callable[[], None],
    ) -> None:
        self.proc = proc
        self.request = request
        self.clock = clock
        self.profile = profile
        self.prompt_mode = prompt_mode
        self._on_unanswerable = unanswerable  # told once the run must be stopped for it
        self.events = EventQueue()
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self.envelope: str | None = None
        self.garbage = False
        # from stream_start (else the home template's agent): is a $0 run free?
        self.provider: str | None = default_provider
        self.question: str | None = None  # asked through the released CLI's ask tool
        self.unanswerable: str | None = None  # a tool needing an approval nobody can give

    async def read_stderr(self) -> None:
        assert self.proc.stderr is not None
        try:
            async for raw in lines(self.proc.stderr):
                line = raw.decode("utf-8", "replace").strip()
                if not line:
                    continue
                event = parse_event(line)
                if event is None:
                    self.stderr_tail.append(mask(line)[:TAIL_LINE_CHARS])  # masked whole, then cut
                    continue
                if self.profile.released:
                    event = self._released_event(event)
                if event.type in PROMPT_EVENTS:
                    ident = event.data.get(_prompt_key(event.type))
                    if isinstance(ident, str):
                        self.clock.ask(ident)
                elif event.type == "approval_resolved":  # settled by the runner itself
                    ident = event.data.get("toolCallId")
                    if isinstance(ident, str) and ident in self.clock.pending:
                        self.clock.settle(ident)
                elif event.type == "error":
                    message = event.data.get("message") or event.data.get("error")
                    if isinstance(message, str):
                        self.stderr_tail.append(mask(message)[:TAIL_LINE_CHARS])
                await self.events.put(event, len(line))
        finally:
            self.events.end()

    def _released_event(self, event: RunnerEvent) -> RunnerEvent:
        """A released CLI's event in the documented shape; what it settles by itself (an
        auto-approved tool) or cannot take (an approval with the prompt on stdin) is no
        prompt for a person."""
        data = event.data
        if event.type == "tool_call":
            data = flat_tool_call(data)
        if event.type in TOOL_EVENTS and data.get("toolName") == ASK_TOOL:
            self.question = self.question or question_of(data.get("arguments"))
        elif event.type == "stream_start" and isinstance(data.get("provider"), str):
            self.provider = data["provider"]
        elif event.type == "approval_required":
            if not needs_person(data, self.request.approval_policy):
                return RunnerEvent("approval_auto", data)
            if self.prompt_mode != "argv":  # stdin is closed: nobody's answer could reach it
                tool = data.get("toolName")
                self.unanswerable = str(tool) if isinstance(tool, str) else "a tool"
                self._on_unanswerable()
                return RunnerEvent("approval_unavailable", data)
        elif event.type == "warning":
            _log_warning_once(mask(str(data.get("message", "")))[:TAIL_LINE_CHARS])
        return RunnerEvent(event.type, data) if data is not event.data else event

    async def read_stdout(self) -> None:
        assert self.proc.stdout is not None
        async for raw in lines(self.proc.stdout):
            line = raw.decode("utf-8", "replace").strip()
            if line.startswith("{"):
                self.envelope = line
                self.garbage = False
                self.close_stdin()  # the released CLI waits for it after an approval
            elif line and self.envelope is None and not SHUTDOWN_LINE.fullmatch(line):
                self.garbage = True

    def close_stdin(self) -> None:
        stdin = self.proc.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()


async def lines(stream: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """Lines of a stream, each capped at MAX_LINE (an overlong line is dropped whole)."""
    buf = bytearray()
    overflow = False
    while True:
        chunk = await stream.read(CHUNK)
        if not chunk:
            break
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                if not overflow:
                    buf += chunk[start:]
                    if len(buf) > MAX_LINE:
                        buf.clear()
                        overflow = True
                break
            if not overflow:
                buf += chunk[start:nl]
                yield bytes(buf)
            buf.clear()
            overflow = False
            start = nl + 1
    if buf and not overflow:
        yield bytes(buf)


def parse_event(line: str) -> RunnerEvent | None:
    """The event a stderr line is, if it is one (a JSON object with a string ``type``)."""
    if not line.startswith("{"):
        return None
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        return None
    return RunnerEvent(type=data["type"], data=data)


def _prompt_key(event_type: str) -> str:
    """The id a prompt event is answered by (the key its answer frame carries)."""
    return "toolCallId" if event_type == "approval_required" else "requestId"


_WARNINGS_SEEN: OrderedDict[str, None] = OrderedDict()
WARNINGS_KEPT = 256


def _log_warning_once(message: str) -> None:
    """A runner's ``warning`` event (the released CLI repeats its own at every run, e.g.
    "No context window is pinned"), logged the first time it is seen."""
    if message in _WARNINGS_SEEN:
        return
    _WARNINGS_SEEN[message] = None
    while len(_WARNINGS_SEEN) > WARNINGS_KEPT:
        _WARNINGS_SEEN.popitem(last=False)
    log.warning("the runner warns (shown once): %s", message)
