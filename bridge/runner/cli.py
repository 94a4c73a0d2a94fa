"""The CLI backend: one ``jazz run --json`` process per message, in the binary's dialect.

Which CLI ``runner.command`` is (documented or released, :mod:`.dialect`) is found once at
start. The documented CLI gets the chat text as a JSON line on stdin; the released one as
its positional argument after ``--`` (so text starting with ``-`` stays the prompt), which
is the only way it takes approvals on stdin: so that no other conversation reads it in
``/proc/<pid>/cmdline``, each such run starts in a PID namespace with a private ``/proc``
(:mod:`provisioning.private_proc`), or, isolated under a ``/proc`` that already hides
other accounts' processes (systemd's ``ProtectProc=invisible``), as it is. Where neither
holds, or the text is too long for an argument, the released CLI reads it from stdin,
closed at once, and a run that then needs an approval is stopped with a reply saying why.
Stdin is closed once the envelope is read (the released CLI waits for that after an
approval).

Progress comes as NDJSON on stderr (the released CLI's events put in the documented shapes
here), one envelope on stdout. The process runs as the conversation's account, in its own
session; a timeout (the gateway's own clock, paused while a person is being asked: the
released CLI's ``--timeout`` would count that time, so it gets a long one) or ``/stop``
ends it with SIGTERM, then SIGKILL for the whole run after the grace, including children
that left the group. Single-account runs without a namespace start behind a subreaper of
their own (:mod:`.reaper`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import stat
import sys
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from provisioning import private_proc
from provisioning.cgroups import CgroupError, CgroupTree, RunCgroup
from provisioning.errors import ProvisioningError, RlimitsUnavailable
from provisioning.rlimits import RunLimits
from provisioning.sandbox import RunIdentity, hide_from_own_account
from reference_runner import bundle

from ..errors import RunnerError
from ..logs import mask
from . import killer
from .base import (
    LIMIT_HIT_FLAG,
    PROMPT_EVENTS,
    RunHandle,
    RunnerBackend,
    RunnerEvent,
    RunRequest,
    RunResult,
    finalize,
)
from .dialect import (
    DOCUMENTED_ASSUMED,
    LONG_TIMEOUT_MS,
    MAX_ARGV_PROMPT_BYTES,
    CliProfile,
    flat_tool_call,
    needs_person,
    question_of,
)
from .envelope import parse_envelope
from .procs import RUN_TAG_ENV, Sweeps, kill_all, signal_group
from .reaper import wrap
from .spawn import Child, start_process

log = logging.getLogger(__name__)

STDERR_TAIL = 60  # a provider failure of the released CLI is a ~50-line stack trace
TAIL_LINE_CHARS = 500  # a stderr line kept for the failure reply, cut after its secrets are masked
TOOL_MODE = 0o0755  # rwxr-xr-x  shared runner tools, readable by every account
MAX_LINE = 16 * 1024 * 1024  # an envelope (or event) longer than this is not one
CHUNK = 256 * 1024
MAX_QUEUED_EVENTS = 256  # progress events read ahead of the engine; then the runner waits
# and as many bytes of them (one event up to MAX_LINE always passes): 256 events of up to
# MAX_LINE each would be 4 GiB held for one run whose engine is busy
MAX_QUEUED_BYTES = 16 * 1024 * 1024
EXIT_POLL_S = 0.05  # how often an exit is looked for while a leftover child holds the pipes
# where a run's prompt goes: a JSON line on stdin (documented CLI), the last argument, or
# all of stdin, closed at once (released CLI)
PromptMode = Literal["json", "argv", "stdin"]
# what the released CLI prints on stdout when it is stopped (its only output then)
SHUTDOWN_LINE = re.compile(r"Received SIG[A-Z]+\. Shutting down\.\.\.")
ASK_TOOL = "ask_user_question"  # the released CLI's question tool: it cannot reach a person
TOOL_EVENTS = frozenset({"tool_call", "tool_execution_start"})
ANSWER_FRAMES = {
    "approval_decision": "toolCallId",
    "user_input_response": "requestId",
    "user_secret_response": "requestId",
}


class CliRunner(RunnerBackend):
    name = "cli"
    runs_in_workspace = True  # run_identity's cwd

    def __init__(
        self,
        command: Sequence[str],
        *,
        kill_grace_s: float = 3.0,
        profile: CliProfile = DOCUMENTED_ASSUMED,
        private_proc: bool = False,
        argv_hidden: bool | None = None,
        default_provider: str | None = None,
        cgroups: CgroupTree | None = None,
        run_limits: RunLimits | None = None,
    ) -> None:
        if not command:
            raise RunnerError("runner.command is empty")
        # a cgroup per run (provisioning/cgroups.py) where the host lets the gateway make
        # them: ``run_limits``' memory and process counts over the whole run, not per
        # process or per uid as the rlimits count them
        self.cgroups = cgroups
        self.run_limits = run_limits or RunLimits()
        self.command = list(command)
        self.kill_grace_s = kill_grace_s
        self.profile = profile
        # a run whose prompt is on argv starts in a PID namespace with a private /proc
        # (probed by the caller); argv_hidden: no other conversation can read a run's
        # command line, by that namespace or by the host's /proc (hidepid, isolated runs)
        self.private_proc = private_proc
        self.argv_hidden = private_proc if argv_hidden is None else argv_hidden
        # the model provider of runner.agent in the home template (runs that never said)
        self.default_provider = default_provider
        self.sweeps = Sweeps()  # finished runs' leftovers, one /proc scan for many
        self._found = False

    def prompt_mode(self, request: RunRequest) -> PromptMode:
        """Where the prompt goes: ``json`` (documented: a JSON line on stdin), ``argv``
        (released, hidden from other conversations), ``stdin`` (released: raw, closed)."""
        if not self.profile.released:
            return "json"
        fits = len(request.prompt.encode("utf-8", "surrogatepass")) <= MAX_ARGV_PROMPT_BYTES
        return "argv" if self.argv_hidden and fits and "\0" not in request.prompt else "stdin"

    def argv(self, request: RunRequest, mode: PromptMode = "json") -> list[str]:
        if self.profile.released:
            return self._released_argv(request, mode)
        argv = [
            *self.command,
            "run",
            "--json",
            "--no-tui",
            "--agent",
            request.agent,
            "--conversation",
            request.conversation,
            "--approval-policy",
            request.approval_policy,
            "--events",
            ",".join(request.events),
            "--interactive-stdin",
            "--input-stdin",
            "--timeout",
            str(int(request.timeout_s * 1000)),
        ]
        return argv

    def _released_argv(self, request: RunRequest, mode: PromptMode) -> list[str]:
        """The released CLI's flags, each only where its help lists it; the prompt last."""
        accepts = self.profile.options
        categories = self.profile.categories or frozenset()
        events = [e for e in request.events if e in categories]
        if "usage" in categories and "usage" not in events:
            events.append("usage")  # stream_start names the provider: is a $0 run free?
        argv = [*self.command, "run", "--json", "--agent", request.agent]
        wanted = [
            ("--conversation", request.conversation),
            ("--approval-policy", request.approval_policy),
            ("--events", ",".join(events)),
            ("--timeout", str(LONG_TIMEOUT_MS)),
        ]
        argv += [
            part for flag, value in wanted if flag in accepts and value for part in (flag, value)
        ]
        if "--stream" in accepts and events:
            argv.append("--stream")  # events through a pipe come only when streaming
        if mode == "argv":
            argv += ["--", request.prompt]
        return argv

    async def start(self, request: RunRequest) -> RunHandle:
        tag = request.kill_tag or secrets.token_hex(12)
        try:
            workdir, cgroup = await asyncio.to_thread(self._prepare, request.identity, tag)
        except CgroupError as exc:
            raise RunnerError(f"cannot start the run in a cgroup of its own: {exc}") from exc
        except (ProvisioningError, OSError) as exc:
            raise RunnerError(f"cannot open the run's home {request.home.path}: {exc}") from exc
        try:
            return await self._spawn(request, tag, workdir, cgroup)
        except BaseException:
            if cgroup is not None:
                await asyncio.to_thread(cgroup.close)
            raise

    def _prepare(self, identity: RunIdentity, tag: str) -> tuple[int, RunCgroup | None]:
        """The run's working directory (a descriptor) and its cgroup. Blocking."""
        cgroup = None
        # the child enters its cgroup before its identity switch; a switch done by Popen
        # itself (no setpriv) comes before exec, and the child could no longer enter
        enters = identity.uid is None or identity.setpriv is not None
        if self.cgroups is not None and enters:
            cgroup = self.cgroups.make(f"run-{tag}", self.run_limits)
        try:
            return identity.open_workdir(), cgroup
        except BaseException:
            if cgroup is not None:
                cgroup.close()
            raise

    async def _spawn(
        self, request: RunRequest, tag: str, workdir: int, cgroup: RunCgroup | None
    ) -> RunHandle:
        mode = self.prompt_mode(request)
        # only a prompt on argv needs hiding: the rest of a command line names nobody
        identity = replace(request.identity, private_proc=mode == "argv" and self.private_proc)
        try:
            kwargs = identity.popen_kwargs(workdir)
            kwargs["env"] = {**kwargs["env"], RUN_TAG_ENV: tag}
            self._check_command(kwargs["env"].get("PATH"))
            argv = identity.command(self.argv(request, mode))
            if identity.uid is None:
                hide_from_own_account()  # the run's uid is ours: /proc/<our pid>/environ
            if identity.uid is None and not identity.private_proc:
                # single account, no namespace: the uid sweep cannot find all of a run; the
                # gateway's own Python may sit where its runs cannot reach (a root pyenv)
                argv = wrap(argv, self.kill_grace_s, shared_interpreter())
            if cgroup is not None:  # outermost: all of it is born in the cgroup
                argv = cgroup.join(argv)
            proc = await start_process(argv, **kwargs)
        except (FileNotFoundError, PermissionError) as exc:
            raise RunnerError(
                f"cannot start the runner {self.command[0]!r}: {exc.strerror}; check runner.command"
            ) from exc
        except RlimitsUnavailable as exc:
            raise RunnerError(f"cannot start the runner under its limits: {exc}") from exc
        finally:
            os.close(workdir)  # the child has its own copy (entered before it ran)
        handle = CliRunHandle(
            proc,
            request,
            tag,
            self.kill_grace_s,
            self.sweeps,
            profile=self.profile,
            prompt_mode=mode,
            private_proc=identity.private_proc,
            argv_hidden=self.argv_hidden,
            default_provider=self.default_provider,
            cgroup=cgroup,
        )
        await handle.begin()
        return handle

    async def close(self) -> None:
        await self.sweeps.close()
        if self.cgroups is not None:
            await asyncio.to_thread(self.cgroups.close)
        await asyncio.to_thread(killer.close)  # its helper, if isolated runs started it

    def _check_command(self, path: str | None) -> None:
        """A runner that is not there is a clear error, also behind ``setpriv`` (whose own
        failure to exec would only read as a run without an envelope). Checked until found."""
        if self._found:
            return
        program = self.command[0]
        found = shutil.which(program, path=path) if os.sep not in program else program
        if found is None or not os.access(found, os.X_OK):
            raise RunnerError(
                f"cannot start the runner {program!r}: not found or not executable; "
                "check runner.command"
            )
        self._found = True


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
        # from stream_start (else the home template's agent): is a $0 run free?
        self._provider: str | None = default_provider
        self._question: str | None = None  # asked through the released CLI's ask tool
        self._unanswerable: str | None = None  # a tool needing an approval nobody can give
        self.tag = tag
        self.grace = grace
        self.started = time.monotonic()
        # bounded: while the engine is busy (showing a prompt), a runner that keeps writing
        # events waits on its full stderr pipe instead of growing the gateway's memory;
        # each event is queued with its size, bounded in sum by MAX_QUEUED_BYTES
        self._events: asyncio.Queue[tuple[RunnerEvent, int] | None] = asyncio.Queue(
            MAX_QUEUED_EVENTS
        )
        self._queued_bytes = 0
        self._room = asyncio.Event()  # set whenever the engine took an event
        self._events_ended = False
        self._stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self._envelope: str | None = None
        self._garbage = False
        self._pending: set[str] = set()  # prompt ids waiting for a person
        self._active_s = 0.0  # run time not spent waiting for a person
        self._active_since: float | None = time.monotonic()
        self._stop_reason: str | None = None
        self._timed_out = False
        self._tasks: list[asyncio.Task[None]] = []
        self._result: RunResult | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._done = asyncio.Event()
        self._stdin_lock = asyncio.Lock()

    async def begin(self) -> None:
        # The readers and the watchdog exist before the prompt is written, and the prompt is
        # handed to the pipe without waiting for the runner to read it: a prompt larger
        # than the pipe's buffer, to a runner that reads it late (or fills stderr first),
        # would otherwise hold start() with no timeout and no handle to stop.
        self._tasks = [
            asyncio.create_task(self._read_stderr(), name="runner-stderr"),
            asyncio.create_task(self._read_stdout(), name="runner-stdout"),
            asyncio.create_task(self._watchdog(), name="runner-watchdog"),
        ]
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

    # -- streams ----------------------------------------------------------------------------

    async def _lines(self, stream: asyncio.StreamReader) -> AsyncIterator[bytes]:
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

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        try:
            async for raw in self._lines(self.proc.stderr):
                line = raw.decode("utf-8", "replace").strip()
                if not line:
                    continue
                event = _event(line)
                if event is None:
                    self._stderr_tail.append(mask(line)[:TAIL_LINE_CHARS])  # masked whole, then cut
                    continue
                if self.profile.released:
                    event = self._released_event(event)
                if event.type in PROMPT_EVENTS:
                    ident = event.data.get(_prompt_key(event.type))
                    if isinstance(ident, str):
                        self._pending.add(ident)
                        self._pause()
                elif event.type == "approval_resolved":  # settled by the runner itself
                    ident = event.data.get("toolCallId")
                    if isinstance(ident, str) and ident in self._pending:
                        self._pending.discard(ident)
                        self._resume()
                elif event.type == "error":
                    message = event.data.get("message") or event.data.get("error")
                    if isinstance(message, str):
                        self._stderr_tail.append(mask(message)[:TAIL_LINE_CHARS])
                size = len(line)
                while self._queued_bytes and self._queued_bytes + size > MAX_QUEUED_BYTES:
                    self._room.clear()
                    await self._room.wait()
                self._queued_bytes += size
                await self._events.put((event, size))
        finally:
            # the end is told even when the queue is full (or this task is cancelled while
            # it waits for room): events() also ends once it finds the queue empty after it
            self._events_ended = True
            with contextlib.suppress(asyncio.QueueFull):
                self._events.put_nowait(None)

    def _released_event(self, event: RunnerEvent) -> RunnerEvent:
        """A released CLI's event in the documented shape; what it settles by itself (an
        auto-approved tool) or cannot take (an approval with the prompt on stdin) is no
        prompt for a person."""
        data = event.data
        if event.type == "tool_call":
            data = flat_tool_call(data)
        if event.type in TOOL_EVENTS and data.get("toolName") == ASK_TOOL:
            self._question = self._question or question_of(data.get("arguments"))
        elif event.type == "stream_start" and isinstance(data.get("provider"), str):
            self._provider = data["provider"]
        elif event.type == "approval_required":
            if not needs_person(data, self.request.approval_policy):
                return RunnerEvent("approval_auto", data)
            if self.prompt_mode != "argv":  # stdin is closed: nobody's answer could reach it
                tool = data.get("toolName")
                self._unanswerable = str(tool) if isinstance(tool, str) else "a tool"
                self._tasks.append(
                    asyncio.create_task(self.stop("approval_unavailable"), name="runner-stop")
                )
                return RunnerEvent("approval_unavailable", data)
        elif event.type == "warning":
            _log_warning_once(mask(str(data.get("message", "")))[:TAIL_LINE_CHARS])
        return RunnerEvent(event.type, data) if data is not event.data else event

    async def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self._lines(self.proc.stdout):
            line = raw.decode("utf-8", "replace").strip()
            if line.startswith("{"):
                self._envelope = line
                self._garbage = False
                self._close_stdin()  # the released CLI waits for it after an approval
            elif line and self._envelope is None and not SHUTDOWN_LINE.fullmatch(line):
                self._garbage = True

    def _close_stdin(self) -> None:
        stdin = self.proc.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()

    # -- timeout, paused while a person is asked --------------------------------------------

    def _pause(self) -> None:
        if self._active_since is not None:
            self._active_s += time.monotonic() - self._active_since
            self._active_since = None

    def _resume(self) -> None:
        if self._active_since is None and not self._pending:
            self._active_since = time.monotonic()

    def active_seconds(self) -> float:
        running = time.monotonic() - self._active_since if self._active_since else 0.0
        return self._active_s + running

    async def _watchdog(self) -> None:
        # The runner gets the timeout too; ours is the backstop a little after it.
        limit = self.request.timeout_s + max(2.0, self.grace)
        while self.proc.returncode is None:
            left = limit - self.active_seconds()
            if left <= 0:
                self._timed_out = True
                await self.stop("timeout")
                return
            await asyncio.sleep(min(left, 0.5) if self._active_since else 0.5)

    # -- control ----------------------------------------------------------------------------

    def events(self) -> AsyncIterator[RunnerEvent]:
        return self._iter_events()

    async def _iter_events(self) -> AsyncIterator[RunnerEvent]:
        while True:
            if self._events_ended and self._events.empty():
                return
            item = await self._events.get()
            if item is None:
                return
            event, size = item
            self._queued_bytes -= size
            self._room.set()
            yield event

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
            self._pending.discard(ident)
            self._resume()

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
        the process is reaped.
        """
        waiter = asyncio.ensure_future(self.proc.wait())
        try:
            while self.proc.returncode is None:
                done, _ = await asyncio.wait({waiter}, timeout=EXIT_POLL_S)
                if done:
                    return
        finally:
            waiter.cancel()

    async def _finish(self) -> None:
        try:
            await self._exited()
            if self.cgroup is not None:  # all it started, whatever session or uid, at once
                self._limit_hit, left = await asyncio.to_thread(self.cgroup.finish)
                if left:
                    log.info("run %s left %d process(es) in its cgroup: killed", self.tag, left)
            # The run is over: nothing it started may linger (children that called setsid).
            # The sweep runs beside reading the last output and recording the answer (it
            # also closes pipes a lingering child holds); settled() waits for it.
            self._sweeper = asyncio.create_task(self._sweep(urgent=False), name="runner-sweep")
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(*self._tasks[:2]), timeout=5)
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self._result = self._build_result()
        finally:
            self._done.set()

    async def settled(self) -> None:
        await self._done.wait()
        if self._sweeper is not None:
            await asyncio.shield(self._sweeper)

    def _build_result(self) -> RunResult:
        duration_ms = int((time.monotonic() - self.started) * 1000)
        returncode = self.proc.returncode
        if self.private_proc:  # behind the namespace's init shell: 128+N is signal N
            returncode = private_proc.exit_code(returncode)
        result = parse_envelope(
            self._envelope,
            exit_code=returncode,
            stderr_tail=list(self._stderr_tail),
            duration_ms=duration_ms,
            garbage=self._garbage,
            provider=self._provider,
        )
        if self._limit_hit is not None and not result.ok:
            result = replace(result, flags={**result.flags, LIMIT_HIT_FLAG: self._limit_hit})
        if self._question and result.ok:
            result = replace(result, flags={**result.flags, "unasked_question": self._question})
        result = finalize(
            result,
            timeout_s=self.request.timeout_s,
            timed_out=self._timed_out,
            stop_reason=self._stop_reason,
        )
        if self._unanswerable is not None and not result.ok:
            if not self.argv_hidden:
                why = "runs here cannot have a private /proc"
            elif "\0" in self.request.prompt:  # prompt_mode's other reason for stdin
                why = "the message contains a NUL character, which no argument can hold"
            else:
                why = "the message is too long to pass as an argument"
            result = replace(
                result,
                code="approval_unavailable",
                stopped=False,
                error=(
                    f"the agent needed an approval for {self._unanswerable}, which this Jazz "
                    f"CLI can only take when the message is passed as an argument, and {why}; "
                    "an operator can raise runner.approval_policy or fix that"
                ),
            )
        return result

    async def wait(self) -> RunResult:
        await self._done.wait()
        assert self._result is not None
        return self._result


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


def _prompt_key(event_type: str) -> str:
    """The id a prompt event is answered by (the key its answer frame carries)."""
    return "toolCallId" if event_type == "approval_required" else "requestId"


def _event(line: str) -> RunnerEvent | None:
    if not line.startswith("{"):
        return None
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        return None
    return RunnerEvent(type=data["type"], data=data)


def reachable_by_others(path: str, *, need: int = stat.S_IXOTH) -> bool:
    """True when an account outside the owner's group can reach and use ``path``.

    A conversation account runs the runner: an interpreter under ``/root`` (pyenv) is not
    usable by it, whatever root can do.
    """
    real = os.path.realpath(path)
    try:
        if not os.stat(real).st_mode & need:
            return False
        parent = os.path.dirname(real)
        while True:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
            if parent == "/":
                return True
            parent = os.path.dirname(parent)
    except OSError:
        return False


def shared_interpreter() -> str:
    """A Python interpreter every account can run (ours if it is, else the system's)."""
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        if candidate and reachable_by_others(candidate):
            return candidate
    return sys.executable


def reference_copy(tools_dir: Path) -> Path:
    """Where :func:`default_command` puts the reference runner for every account to run."""
    return tools_dir / f"jazz-reference-runner{bundle.SUFFIX}"


def default_command(
    configured: Sequence[str] | None, tools_dir: Path | None = None
) -> tuple[list[str], bool]:
    """The runner command: configured, else ``jazz`` on PATH, else the reference runner.

    Returns ``(argv, is_reference)``. The reference runner (the stdlib-only package
    ``reference_runner``) is started as its directory; when ``tools_dir`` is given it is
    written there as one file (a zip application, readable by every account) and started
    with an interpreter every account can run, so isolated conversations can start it even
    when the gateway's own Python lives somewhere only root can reach.
    """
    if configured:
        return list(configured), False
    jazz = shutil.which("jazz")
    if jazz:
        return [jazz], False
    script = bundle.PACKAGE
    if tools_dir is not None:
        target = reference_copy(tools_dir)
        data = bundle.archive()
        if not target.exists() or target.read_bytes() != data:
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(data)
            os.chmod(tmp, TOOL_MODE)
            os.replace(tmp, target)
        script = target
    return [shared_interpreter(), str(script)], True
