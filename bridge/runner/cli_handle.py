"""One CLI run in flight: its prompt written, its clock watched, its answers, its end.

The handle a :class:`.cli.CliRunner` returns for one ``jazz run --json`` process: it
hands the prompt to the process's stdin (without waiting for it to be read), keeps the
run's own timeout (paused while a person is asked), writes answers to stdin, stops the
run (SIGTERM, then SIGKILL for all of it after the grace, children that left the group
included) and, once the process has exited, empties its cgroup (or, without one, sweeps
what it left) and assembles the result. Reading the streams is :mod:`.cli_streams`'s; the
result's rules are :mod:`.cli_result`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

from provisioning.cgroups import RunCgroup

from .base import RunHandle, RunnerEvent, RunRequest, RunResult
from .cli_argv import PromptMode
from .cli_result import build_result
from .cli_streams import CliStreams
from .clock import PromptClock
from .dialect import DOCUMENTED_ASSUMED, CliProfile
from .procs import Sweeps, kill_all, signal_group
from .spawn import Child

log = logging.getLogger(__name__)

WATCH_EVERY_S = 0.5  # how often the timeout's backstop looks at the run's active time
EXIT_POLL_S = 0.05  # how often an exit is looked for while a leftover child holds the pipes
ANSWER_FRAMES = {
    "approval_decision": "toolCallId",
    "user_input_response": "requestId",
    "user_secret_response": "requestId",
}


class CliRunHandle(RunHandle):
    def __init__(
        self,
        proc: Child,
        request: RunRequest,
        tag: str,
        grace: float,
        sweeps: Sweeps | None = None,
        *,
        profile: CliProfile = DOCUMENTED_ASSUMED,
        prompt_mode: PromptMode = "json",
        private_proc: bool = False,
        argv_hidden: bool = False,
        default_provider: str | None = None,
        cgroup: RunCgroup | None = None,
    ) -> None:
        self.proc = proc
        self.cgroup = cgroup
        self._limit_hit: str | None = None  # what the cgroup says the run ran into
        self.sweeps = sweeps
        self.request = request
        self.profile = profile
        self.prompt_mode = prompt_mode
        self.private_proc = private_proc
        self.argv_hidden = argv_hidden
        self.tag = tag
        self.grace = grace
        self.started = time.monotonic()
        self._clock = PromptClock()  # run time not spent waiting for a person
        self._streams = CliStreams(
            proc,
            request,
            self._clock,
            profile=profile,
            prompt_mode=prompt_mode,
            default_provider=default_provider,
            unanswerable=lambda: self._stop_soon("approval_unavailable"),
        )
        self._stop_reason: str | None = None
        self._timed_out = False
        self._tasks: list[asyncio.Task[None]] = []
        self._result: RunResult | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._done = asyncio.Event()
        self._stdin_lock = asyncio.Lock()
        self._watchdog: asyncio.TimerHandle | None = None  # see _watch

    async def begin(self) -> None:
        # The readers and the watchdog exist before the prompt is written, and the prompt is
        # handed to the pipe without waiting for the runner to read it: a prompt larger
        # than the pipe's buffer, to a runner that reads it late (or fills stderr first),
        # would otherwise hold start() with no timeout and no handle to stop.
        self._tasks = [
            asyncio.create_task(self._streams.read_stderr(), name="runner-stderr"),
            asyncio.create_task(self._streams.read_stdout(), name="runner-stdout"),
        ]
        self._watch()
        self._finisher = asyncio.create_task(self._finish(), name="runner-finish")
        assert self.proc.stdin is not None
        if self.prompt_mode == "argv":
            return  # stdin stays open for the answers
        if self.prompt_mode == "stdin":  # the released CLI reads all of it: closed at once
            first = self.request.prompt
        else:
            first = json.dumps({"prompt": self.request.prompt, **self._attachments()}) + "\n"
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.proc.stdin.write(first.encode())  # buffered; answers drain it in order
        if self.prompt_mode == "stdin":
            self.proc.stdin.close()

    def _attachments(self) -> dict[str, Any]:
        if not self.request.attachments:
            return {}
        return {"attachments": list(self.request.attachments)}

    def _stop_soon(self, reason: str) -> None:
        """Stop the run beside the reading (a task of the run's, ended with it)."""
        self._tasks.append(asyncio.create_task(self.stop(reason), name="runner-stop"))

    # -- timeout, paused while a person is asked --------------------------------------------

    def active_seconds(self) -> float:
        return self._clock.seconds()

    def _watch(self) -> None:
        """The timeout's backstop (the runner gets the timeout too; this is a little after
        it): a timer looking again every half second, or when the time is up; no task."""
        self._watchdog = None
        if self.proc.returncode is not None or self._done.is_set():
            return
        left = self.request.timeout_s + max(2.0, self.grace) - self.active_seconds()
        if left <= 0:
            self._timed_out = True
            self._stop_soon("timeout")
            return
        wait = min(left, WATCH_EVERY_S) if self._clock.running else WATCH_EVERY_S
        self._watchdog = asyncio.get_running_loop().call_later(wait, self._watch)

    # -- control ----------------------------------------------------------------------------

    def events(self) -> AsyncIterator[RunnerEvent]:
        return self._streams.events.drain()

    async def answer(self, frame: dict[str, Any]) -> None:
        """Hand the answer to the runner's stdin; the person is no longer waited on.

        The prompt stops pausing the clock as soon as the frame is in the pipe's buffer
        (whether or not the runner ever reads it): nobody else will answer it, and a runner
        that does not read its stdin (a prompt larger than the pipe still unread ahead of
        the answer) must still meet its timeout. Waiting for the pipe to drain is bounded by
        the kill grace so the engine is not held either; what is unwritten stays buffered.
        """
        ident = frame.get(ANSWER_FRAMES.get(str(frame.get("type")), ""))
        data = (json.dumps(frame) + "\n").encode()
        try:
            async with self._stdin_lock:
                stdin = self.proc.stdin
                if stdin is None or stdin.is_closing():
                    return
                try:
                    stdin.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    return
                self._answered(ident)
                try:
                    await asyncio.wait_for(stdin.drain(), timeout=self.grace)
                except (BrokenPipeError, ConnectionResetError):
                    return
                except TimeoutError:
                    log.warning(
                        "runner pid %d has not read its stdin for %.1fs; the answer to %s "
                        "stays buffered",
                        self.proc.pid,
                        self.grace,
                        ident,
                    )
        finally:
            self._answered(ident)  # also when undeliverable: nobody is left to answer it

    def _answered(self, ident: Any) -> None:
        """The prompt ``ident`` no longer waits for a person: its time counts again."""
        if isinstance(ident, str):
            self._clock.settle(ident)

    async def stop(self, reason: str = "stopped") -> None:
        if self.proc.returncode is not None:
            return
        if self._stop_reason is None:
            self._stop_reason = reason
        pgid = self.proc.pid
        signal_group(pgid, signal.SIGTERM)
        try:
            await asyncio.wait_for(self._exited(), timeout=self.grace)
        except TimeoutError:
            log.warning("runner pid %d ignored SIGTERM for %.1fs; killing it", pgid, self.grace)
        else:
            if self.proc.returncode == -signal.SIGKILL:  # its subreaper's doing (single account)
                log.warning("runner pid %d ignored SIGTERM; its reaper killed it", pgid)
        if self.cgroup is not None:
            # everything of the run, whatever session or uid, the leader too; the finish
            # removes the cgroup once the leader is reaped (and sweeps if it cannot)
            await asyncio.to_thread(self.cgroup.kill)
            return
        await self._sweep()

    async def _sweep(self, *, urgent: bool = True) -> None:
        uid = self.request.identity.uid
        # a reaped leader's pid may name another process's group by now: signal the group
        # only where it was not killed at exit (while the pid was still the run's)
        reaped = self.proc.returncode is not None
        pgid = (
            None if reaped and getattr(self.proc, "group_killed_at_exit", False) else self.proc.pid
        )
        if urgent or self.sweeps is None:  # /stop, timeout: now, on its own
            left = await asyncio.to_thread(kill_all, self.tag, uid, pgid)
        else:
            left = await self.sweeps.sweep(self.tag, uid, pgid)
        if left:
            log.error("processes %s of a run survived SIGKILL", left)

    async def _exited(self) -> None:
        """Return once the main process has exited (been reaped).

        ``Process.wait()`` (CPython 3.11) wakes its waiters only once every pipe has closed
        too, and a child that left the group holding stdout never closes it before the
        sweep that follows this: the exit is also watched on ``returncode``, set as soon as
        the process is reaped. A child watched on a pidfd says so at once: no polling.
        """
        if getattr(self.proc, "exit_seen_at_reap", False):
            await self.proc.wait()
            return
        waiter = asyncio.ensure_future(self.proc.wait())
        try:
            while self.proc.returncode is None:
                done, _ = await asyncio.wait({waiter}, timeout=EXIT_POLL_S)
                if done:
                    return
        finally:
            waiter.cancel()

    # -- the end ----------------------------------------------------------------------------

    async def _finish(self) -> None:
        try:
            await self._exited()
            if self._watchdog is not None:
                self._watchdog.cancel()
                self._watchdog = None
            if self.cgroup is not None:  # all it started, whatever session or uid, at once
                self._limit_hit, left = await asyncio.to_thread(self.cgroup.finish)
                if left:
                    log.info("run %s left %d process(es) in its cgroup: killed", self.tag, left)
            if self.cgroup is None or not self.cgroup.removed:
                # The run is over: nothing it started may linger (children that called
                # setsid). Without a cgroup (or one still holding a process) the sweep runs
                # beside reading the last output and recording the answer (it also closes
                # pipes a lingering child holds); settled() waits for it. A cgroup emptied
                # and removed is proof enough: the kernel put every process of the run in it.
                self._sweeper = asyncio.create_task(self._sweep(urgent=False), name="runner-sweep")
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(*self._tasks[:2]), timeout=5)
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self._result = build_result(
                self._streams,
                self.request,
                returncode=self.proc.returncode,
                duration_ms=int((time.monotonic() - self.started) * 1000),
                private_proc_run=self.private_proc,
                argv_hidden=self.argv_hidden,
                limit_hit=self._limit_hit,
                timed_out=self._timed_out,
                stop_reason=self._stop_reason,
            )
        finally:
            self._done.set()

    async def settled(self) -> None:
        await self._done.wait()
        if self._sweeper is not None:
            await asyncio.shield(self._sweeper)

    async def wait(self) -> RunResult:
        await self._done.wait()
        assert self._result is not None
        return self._result
