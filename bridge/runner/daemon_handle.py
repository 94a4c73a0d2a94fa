"""One daemon run in flight: polled until it ends, timed, answered, cancelled, settled.

The handle a :class:`.daemon.DaemonRunner` returns for one ``POST /runs``: a task polls
``GET /runs/:id`` (its objects read by :mod:`.daemon_runs`), keeps the run's timeout
(paused while a person is asked), cancels the run on a timeout, a ``/stop`` or an answer
that cannot land, rides out a daemon that stops answering for a while and gives up on it
after ``unreachable_s``. Answers go through :mod:`.daemon_answers`. A run that ended here
without the daemon saying so is waited for (:meth:`DaemonRunHandle.settled`) before the
conversation's next run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from .base import RunHandle, RunnerEvent, RunRequest, RunResult, finalize
from .clock import ActiveClock
from .daemon_answers import answer_request, deliver
from .daemon_client import NETWORK_ERRORS, DaemonProtocolError, describe, poll_run, run_path
from .daemon_runs import RunProgress, failure, finished, result_of

if TYPE_CHECKING:
    from .daemon import DaemonRunner

log = logging.getLogger(__name__)

STDERR_TAIL = 20
STOP_SLACK_S = 1.0  # past the grace, for the poll under way to end before it is cut off
# poll failures that leave nothing on the daemon to cancel (it no longer knows the run)
ABANDON_NOTHING = frozenset({"run_lost"})


class DaemonRunHandle(RunHandle):
    def __init__(self, runner: DaemonRunner, run_id: str, request: RunRequest) -> None:
        self.runner = runner
        self.client = runner.client
        self.run_id = run_id
        self.request = request
        self.path = run_path(run_id)
        self.started = time.monotonic()
        self._events: asyncio.Queue[RunnerEvent | None] = asyncio.Queue()
        self._tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self._progress = RunProgress(run_id, self._events, self._tail)
        self._clock = ActiveClock()  # run time not spent waiting for a person
        self._stop_reason: str | None = None
        self._timed_out = False
        self._cancel_sent = False
        self._refusal: str | None = None  # why the daemon would not take an answer
        self._stop_deadline: float | None = None
        self._wake = asyncio.Event()
        self._result: RunResult | None = None
        self._done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._over = False  # the daemon reported the run over (finished, or unknown to it)
        self._sweeper: asyncio.Task[None] | None = None

    def begin(self, initial: dict[str, Any] | None) -> None:
        self._task = asyncio.create_task(self._main(initial), name=f"daemon-run-{self.run_id}")

    def active_seconds(self) -> float:
        return self._clock.seconds()

    # -- polling ----------------------------------------------------------------------------

    async def _main(self, initial: dict[str, Any] | None) -> None:
        try:
            self._result = self._final(await self._poll_loop(initial))
        except asyncio.CancelledError:
            if self._result is None:
                self._result = self._final(self._unconfirmed())
            raise
        except Exception as exc:  # a bug here must still end the run with a result
            log.exception("daemon run %s: polling failed", self.run_id)
            self._result = self._final(
                RunResult(
                    ok=False,
                    code="failed",
                    error=f"the daemon backend failed: {type(exc).__name__}",
                    duration_ms=self._duration_ms(),
                    stderr_tail=list(self._tail),
                )
            )
        finally:
            self.runner.forget(self)
            self._events.put_nowait(None)
            self._done.set()

    async def _poll_loop(self, initial: dict[str, Any] | None) -> RunResult:
        run = initial
        while True:
            if run is not None:
                # new events and prompts; the clock stops while a person is asked
                if self._progress.apply(run):
                    self._clock.pause()
                else:
                    self._clock.resume()
                # the reply to POST /runs may be a bare acknowledgement: only a poll ends a run
                if run is not initial and finished(run):
                    self._over = True
                    return self._ended(result_of(run, self._tail, self._duration_ms()))
            if self._stop_deadline is not None and time.monotonic() >= self._stop_deadline:
                return self._unconfirmed()
            if self._refusal is not None and not self._cancel_sent:
                # parked on an answer that cannot land: cancel it, and poll on until the
                # daemon confirms (one run at a time per conversation)
                log.info("daemon run %s: its answer was refused; cancelling", self.run_id)
                await self._cancel()
            elif (
                self._stop_reason is None
                and not self._cancel_sent
                and self.active_seconds() >= self.request.timeout_s
            ):
                log.info(
                    "daemon run %s: over its %gs timeout; cancelling",
                    self.run_id,
                    self.request.timeout_s,
                )
                self._timed_out = True
                self._stop_reason = "timeout"
                await self._cancel()
            else:
                await self._sleep()
            run, failed = await self._fetch()
            if failed is not None:
                await self._abandon(failed)
                return failed

    async def _abandon(self, failed: RunResult) -> None:
        """Cancel, best effort, a run given up on that may still be working on the daemon.

        The person is told it failed and the conversation is freed: left running, it would
        run beside their next message in the same conversation (forking its history).
        """
        if failed.code in ABANDON_NOTHING or self._cancel_sent:
            return
        log.warning("daemon run %s: given up on (%s); cancelling it", self.run_id, failed.code)
        await self._cancel()

    async def _sleep(self) -> None:
        delay = self.runner.poll_s
        now = time.monotonic()
        if self._clock.running and self._stop_reason is None:
            delay = min(delay, max(self.request.timeout_s - self.active_seconds(), 0.0))
        if self._stop_deadline is not None:
            delay = min(delay, max(self._stop_deadline - now, 0.0))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=delay)
        self._wake.clear()

    async def _fetch(self) -> tuple[dict[str, Any] | None, RunResult | None]:
        """The run object, or the result that ends the run (lost, refused, unreachable)."""
        polled = await poll_run(
            self.client,
            self.path,
            self.run_id,
            poll_s=self.runner.poll_s,
            unreachable_s=self.runner.unreachable_s,
            stop_deadline=lambda: self._stop_deadline,
        )
        if isinstance(polled, dict):
            return polled, None
        if polled is None:  # the stop's grace passed first
            return None, self._unconfirmed()
        if polled.code == "run_lost":
            self._over = True
        return None, self._failure(polled.code, polled.error)

    # -- results ----------------------------------------------------------------------------

    def _duration_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    def _failure(self, code: str, error: str) -> RunResult:
        return failure(code, error, self._tail, self._duration_ms())

    def _unconfirmed(self) -> RunResult:
        return self._failure(
            "interrupted",
            f"the Jazz daemon did not confirm that run {self.run_id} was cancelled",
        )

    def _ended(self, result: RunResult) -> RunResult:
        """The result of a run that finished: the refused answer's failure says why it ended.

        A success still wins (the daemon finished the run anyway and saved it in history).
        """
        if self._refusal is not None and not result.ok:
            return RunResult(  # its reason is in the tail already (answer() put it there)
                ok=False,
                code="answer_refused",
                error=self._refusal,
                duration_ms=self._duration_ms(),
                stderr_tail=list(self._tail),
            )
        return result

    def _final(self, result: RunResult) -> RunResult:
        return finalize(
            result,
            timeout_s=self.request.timeout_s,
            timed_out=self._timed_out,
            stop_reason=self._stop_reason,
        )

    # -- control ----------------------------------------------------------------------------

    def events(self) -> AsyncIterator[RunnerEvent]:
        return self._iter_events()

    async def _iter_events(self) -> AsyncIterator[RunnerEvent]:
        while True:
            event = await self._events.get()
            if event is None:
                return
            yield event

    async def answer(self, frame: dict[str, Any]) -> None:
        if self._done.is_set():
            return
        request = answer_request(frame)
        if request is None:
            kind = frame.get("type")
            log.warning("daemon run %s: unknown answer frame %r ignored", self.run_id, kind)
            return
        ident, body, operator = request
        # The person has answered: their prompt no longer stops the clock, delivered or not.
        if isinstance(ident, str):
            self._progress.pending.discard(ident)
        if not self._progress.pending:
            self._clock.resume()
        problem = await deliver(
            self.client, self.path, body, operator=operator, run_id=self.run_id, done=self._done
        )
        if self._done.is_set():
            return  # the run ended meanwhile (a stop, its timeout): nothing is waiting on it
        if problem is not None:
            log.error("daemon run %s: answer to %s not delivered: %s", self.run_id, ident, problem)
            self._events.put_nowait(
                RunnerEvent(type="error", data={"type": "error", "message": problem})
            )
            self._tail.append(problem[:500])
            if self._refusal is None:  # nobody is left to answer it: the run ends, saying why
                self._refusal = problem
        self._wake.set()

    async def _cancel(self) -> None:
        if self._cancel_sent:
            return
        self._cancel_sent = True
        self._stop_deadline = time.monotonic() + self.runner.stop_grace_s
        try:
            # bounded by the grace, not the 30 s request timeout: a Stop on a daemon that
            # hangs is answered (and the conversation freed) within it
            async with asyncio.timeout(self.runner.stop_grace_s):
                status = await self.client.send_cancel(self.path)
        except (*NETWORK_ERRORS, DaemonProtocolError) as exc:
            log.warning("daemon run %s: cancel not delivered (%s)", self.run_id, describe(exc))
            return
        if status >= 300 and status not in (404, 409):
            log.warning("daemon run %s: the daemon answered HTTP %d to cancel", self.run_id, status)

    async def stop(self, reason: str = "stopped") -> None:
        if self._done.is_set() or self._task is None:
            return
        if self._stop_reason is None:
            self._stop_reason = reason
        await self._cancel()
        self._wake.set()
        deadline = self._stop_deadline or time.monotonic() + self.runner.stop_grace_s
        left = max(deadline - time.monotonic(), 0.0) + STOP_SLACK_S
        done, _ = await asyncio.wait({self._task}, timeout=left)
        if not done:  # stuck in a request to an unresponsive daemon
            self._task.cancel()
            await asyncio.wait({self._task})

    async def settled(self) -> None:
        """Once the daemon reports the run over (bounded by ``settle_wait_s``).

        A run that ended here without the daemon saying so (a cancel it had not confirmed
        within the grace, a daemon given up on) may still be working there; the engine
        awaits this before the conversation's next run, which would otherwise run beside it.
        """
        await self._done.wait()
        if self._over:
            return
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep(), name=f"daemon-settle-{self.run_id}")
            self.runner.track(self._sweeper)
        await asyncio.shield(self._sweeper)

    async def _sweep(self) -> None:
        """Ask the daemon until it reports the run over, cancelling it again meanwhile."""
        self._over = await self.runner.end_run(self.run_id)

    async def wait(self) -> RunResult:
        assert self._task is not None
        await asyncio.wait({self._task})
        assert self._result is not None
        return self._result
