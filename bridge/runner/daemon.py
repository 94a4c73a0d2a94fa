"""The daemon backend: runs a turn on a long-lived ``jazz daemon`` over its local HTTP API.

Some deployments keep Jazz running as ``jazz daemon`` (one per ``JAZZ_HOME``) instead of
starting ``jazz run`` per message. This backend gives the turn engine the same
:class:`RunHandle` as the CLI backend on top of that API (docs/runner-contract.md, "Daemon
backend"): ``POST /runs`` starts the run, ``GET /runs/:id`` is polled for progress events,
what is waiting for a person and the final envelope, and prompt answers and ``/stop`` become
``POST /runs/:id/answer`` and ``POST /runs/:id/cancel``. Events, prompts and results look
exactly as the CLI backend's do, so the engine cannot tell the two apart.

Every request carries the bearer token (never logged) and never an ``Origin`` header (the
daemon refuses those). The timeout counts only time the run is not waiting for a person; a
daemon that stops answering mid-run is retried with backoff, then reported as a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Collection
from typing import Any
from urllib.parse import quote

import aiohttp

from ..config import RunnerSettings
from ..errors import RunnerError
from .base import (
    PROMPT_EVENTS,
    RunHandle,
    RunnerBackend,
    RunnerEvent,
    RunRequest,
    RunResult,
    finalize,
)
from .envelope import parse_envelope

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=30)
MAX_BODY = 64 * 1024 * 1024  # a poll answer larger than this is not one
STDERR_TAIL = 20
UNREACHABLE_S = 30.0  # how long a daemon may stop answering mid-run before we give up
STOP_GRACE_S = 10.0  # how long to wait for the daemon to confirm a cancel
SETTLE_WAIT_S = 60.0  # how long the next run waits for a stopped run the daemon still runs
STOP_SLACK_S = 1.0  # past the grace, for the poll under way to end before it is cut off
MAX_BACKOFF_S = 5.0
ANSWER_ATTEMPTS = 3  # tries to deliver one answer when the daemon fails transiently
ANSWER_BACKOFF_S = 0.25  # the pause before the first retry; doubled for each next one
TRANSIENT_STATUSES = frozenset({429})  # and every 5xx: worth another try
# the item is not pending: on a retry, the earlier attempt landed; on a first try, it was
# settled on the daemon (in Jazz's own UI) while the person was deciding. Either way the run
# is not parked on it, so nothing is refused and the run goes on.
ANSWERED_ALREADY = 409

# poll failures that leave nothing on the daemon to cancel (it no longer knows the run)
ABANDON_NOTHING = frozenset({"run_lost"})

WAITING_STATES = frozenset({"input-required"})
ACTIVE_STATES = frozenset(
    {"queued", "pending", "starting", "running", "working", "input-required", "paused"}
)
SUCCESS_STATES = frozenset({"completed", "complete", "succeeded", "success", "done", "finished"})
FAILED_STATES = frozenset({"failed", "error", "errored"})
CANCELLED_STATES = frozenset({"cancelled", "canceled", "interrupted", "stopped", "aborted"})
FINISHED_STATES = SUCCESS_STATES | FAILED_STATES | CANCELLED_STATES

# pending item kind -> (event type, id key, other keys the CLI's event carries)
PROMPT_KINDS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "approval": ("approval_required", "toolCallId", ("toolName", "message", "preview")),
    "input": (
        "user_input_required",
        "requestId",
        ("question", "suggestions", "allowCustom"),
    ),
    "secret": ("user_secret_required", "requestId", ("name", "message")),
}
KIND_ALIASES = {
    "approval": "approval",
    "approval_required": "approval",
    "tool_approval": "approval",
    "question": "input",
    "input": "input",
    "user_input": "input",
    "user_input_required": "input",
    "secret": "secret",
    "user_secret": "secret",
    "user_secret_required": "secret",
}

NETWORK_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)


class DaemonProtocolError(Exception):
    """The daemon answered with something that is not a usable HTTP/JSON reply."""


class DaemonRunner(RunnerBackend):
    name = "daemon"

    def __init__(
        self,
        settings: RunnerSettings,
        *,
        unreachable_s: float = UNREACHABLE_S,
        stop_grace_s: float = STOP_GRACE_S,
        settle_wait_s: float = SETTLE_WAIT_S,
    ) -> None:
        self.settings = settings
        self.url = settings.daemon_url.rstrip("/")
        self.poll_s = settings.daemon_poll_s
        self.unreachable_s = unreachable_s
        self.stop_grace_s = stop_grace_s
        self.settle_wait_s = settle_wait_s
        self._session: aiohttp.ClientSession | None = None
        self._handles: set[DaemonRunHandle] = set()
        self._sweepers: set[asyncio.Task[None]] = set()

    # -- HTTP -------------------------------------------------------------------------------

    def _secrets(self) -> list[str]:
        values = [self.settings.daemon_token, self.settings.daemon_operator_token]
        return [v.get_secret_value() for v in values if v is not None and v.get_secret_value()]

    def redact(self, text: str) -> str:
        """``text`` with any configured token replaced (daemon messages may echo headers)."""
        for value in self._secrets():
            text = text.replace(value, "***")
        return text

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # No default headers: every request builds its own, and none ever has Origin.
            self._session = aiohttp.ClientSession(timeout=REQUEST_TIMEOUT, trust_env=False)
        return self._session

    async def request(
        self, method: str, path: str, *, body: dict[str, Any] | None = None, operator: bool = False
    ) -> tuple[int, Any]:
        """One request to the daemon: ``(status, parsed JSON or None)``.

        Raises one of ``NETWORK_ERRORS`` or :class:`DaemonProtocolError` when no usable
        reply came.
        """
        token = self.settings.daemon_token
        if token is None:
            raise RunnerError("runner.daemon_token is not set: the Jazz daemon needs its token")
        headers = {
            "Authorization": f"Bearer {token.get_secret_value()}",
            "Accept": "application/json",
        }
        op = self.settings.daemon_operator_token
        if operator and op is not None:
            headers["X-Jazz-Operator-Token"] = op.get_secret_value()
        async with self._client().request(
            method,
            self.url + path,
            json=body,  # sets Content-Type: application/json when there is a body
            headers=headers,
            allow_redirects=False,  # never carry the token anywhere else
        ) as resp:
            raw = bytearray()
            async for chunk in resp.content.iter_chunked(256 * 1024):
                raw += chunk
                if len(raw) > MAX_BODY:
                    raise DaemonProtocolError(f"reply to {method} {path} is over {MAX_BODY} bytes")
            data: Any = None
            if raw:
                try:
                    data = json.loads(raw)
                except ValueError:
                    data = None
            return resp.status, data

    def detail(self, data: Any) -> str:
        """A short, redacted reason from a daemon error body, for messages."""
        message: Any = None
        if isinstance(data, dict):
            message = data.get("error") or data.get("message")
            if isinstance(message, dict):
                message = message.get("message")
        if not isinstance(message, str) or not message.strip():
            return ""
        return ": " + self.redact(message.strip())[:200]

    async def send_cancel(self, path: str) -> int:
        """Ask the daemon to cancel the run at ``path`` (``DELETE`` where it has no
        ``/cancel``); its status. Raises as :meth:`request` does."""
        status, _ = await self.request("POST", f"{path}/cancel", body={})
        if status in (404, 405):
            status, _ = await self.request("DELETE", path)
        return status

    # -- runs -------------------------------------------------------------------------------

    async def start(self, request: RunRequest) -> RunHandle:
        if self.settings.daemon_token is None:
            raise RunnerError(
                "runner.daemon_token is not set: the Jazz daemon at "
                f"{self.url} needs its bearer token (JAZZ_BRIDGE_RUNNER__DAEMON_TOKEN)"
            )
        body = {
            "agent": request.agent,
            "prompt": request.prompt,
            "conversationId": request.conversation,
        }
        try:
            status, data = await self.request("POST", "/runs", body=body)
        except NETWORK_ERRORS as exc:
            raise RunnerError(
                f"cannot reach the Jazz daemon at {self.url} ({describe(exc)}); "
                "is `jazz daemon` running? check runner.daemon_url"
            ) from None
        except DaemonProtocolError as exc:
            raise RunnerError(
                f"the Jazz daemon at {self.url} sent an unusable reply: {exc}"
            ) from None
        if status in (401, 403):
            raise RunnerError(
                f"the Jazz daemon at {self.url} refused to start a run (HTTP {status})"
                f"{self.detail(data)}; check runner.daemon_token"
            )
        if status >= 500:
            raise RunnerError(
                f"the Jazz daemon at {self.url} failed to start a run (HTTP {status})"
                f"{self.detail(data)}"
            )
        if status >= 300:
            raise RunnerError(
                f"the Jazz daemon at {self.url} rejected the run (HTTP {status}){self.detail(data)}"
            )
        run_id = _run_id(data)
        if run_id is None:
            raise RunnerError(
                f"the Jazz daemon at {self.url} answered POST /runs (HTTP {status}) "
                "without a run id"
            )
        log.info("daemon run %s started for conversation %s", run_id, request.conversation)
        handle = DaemonRunHandle(self, run_id, request)
        self._handles.add(handle)
        handle.begin(data if isinstance(data, dict) and "state" in data else None)
        return handle

    async def end_leftovers(self, conversations: Collection[str]) -> None:
        """Cancel the daemon's active runs of ``conversations`` (left by a gateway process
        that died mid-run) and wait, bounded, until the daemon reports each over. The
        daemon's run list is read leniently (a list, or ``{"runs": [...]}``); a daemon that
        cannot list them is logged, and its leftovers, if any, run out on their own."""
        wanted = set(conversations)
        if not wanted or self.settings.daemon_token is None:
            return
        try:
            async with asyncio.timeout(self.stop_grace_s):
                status, data = await self.request("GET", "/runs")
        except (*NETWORK_ERRORS, DaemonProtocolError) as exc:
            log.warning(
                "could not list the daemon's runs to end %d interrupted run(s): %s",
                len(wanted),
                describe(exc),
            )
            return
        if status != 200:
            log.warning(
                "the Jazz daemon answered HTTP %d to GET /runs%s: runs the restart interrupted "
                "may still work there",
                status,
                self.detail(data),
            )
            return
        left = [
            run_id
            for run in _listed_runs(data)
            if run.get("conversationId") in wanted
            and not _finished(run)
            and (run_id := _run_id(run)) is not None
        ]
        for run_id in left:
            log.warning("daemon run %s was left by the gateway's restart: cancelling it", run_id)
        await asyncio.gather(*(self.end_run(run_id) for run_id in left))

    async def end_run(self, run_id: str) -> bool:
        """Cancel the run until the daemon reports it over (bounded by ``settle_wait_s``);
        whether it did."""
        deadline = time.monotonic() + self.settle_wait_s
        delay = self.poll_s
        while not await self._gone(_run_path(run_id)):
            left = deadline - time.monotonic()
            if left <= 0:
                log.error(
                    "daemon run %s is still active on the daemon %gs after it was ended here; "
                    "the conversation's next run starts beside it",
                    run_id,
                    self.settle_wait_s,
                )
                return False
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, MAX_BACKOFF_S)
        log.info("daemon run %s is over on the daemon", run_id)
        return True

    async def _gone(self, path: str) -> bool:
        """Whether the daemon reports the run at ``path`` over; cancels it (again) when not.

        Nothing listening at the daemon's address counts as over: no daemon, no run.
        """
        with contextlib.suppress(*NETWORK_ERRORS, DaemonProtocolError):
            async with asyncio.timeout(self.stop_grace_s):
                try:
                    status, data = await self.request("GET", path)
                except aiohttp.ClientConnectorError:
                    return True
                if status == 404 or (status == 200 and isinstance(data, dict) and _finished(data)):
                    return True
                if status == 200:
                    await self.send_cancel(path)
        return False

    def track(self, sweeper: asyncio.Task[None]) -> None:
        """Keep ``sweeper`` (a handle's wait for its run to end there) until it is done."""
        self._sweepers.add(sweeper)
        sweeper.add_done_callback(self._sweepers.discard)

    def forget(self, handle: DaemonRunHandle) -> None:
        self._handles.discard(handle)

    async def close(self) -> None:
        handles = list(self._handles)
        if handles:
            await asyncio.gather(*(h.stop("shutdown") for h in handles), return_exceptions=True)
            await asyncio.gather(*(h.wait() for h in handles), return_exceptions=True)
        sweepers = list(self._sweepers)
        for task in sweepers:  # the process is ending: nobody is left to start a next run
            task.cancel()
        await asyncio.gather(*sweepers, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None


class DaemonRunHandle(RunHandle):
    def __init__(self, runner: DaemonRunner, run_id: str, request: RunRequest) -> None:
        self.runner = runner
        self.run_id = run_id
        self.request = request
        self.path = _run_path(run_id)
        self.started = time.monotonic()
        self._events: asyncio.Queue[RunnerEvent | None] = asyncio.Queue()
        self._seen = 0  # how many of the run's events were forwarded
        self._surfaced: set[str] = set()  # prompt ids already emitted
        self._pending: set[str] = set()  # prompt ids emitted and not answered
        self._listed: set[str] = set()  # prompt ids the daemon's run has listed as pending
        self._unshown: set[str] = set()  # pending items no prompt is made of (logged once)
        self._tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self._active_s = 0.0
        self._active_since: float | None = time.monotonic()
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

    # -- active time (paused while a person is asked) ---------------------------------------

    def _pause(self) -> None:
        if self._active_since is not None:
            self._active_s += time.monotonic() - self._active_since
            self._active_since = None

    def _resume(self) -> None:
        if self._active_since is None:
            self._active_since = time.monotonic()

    def active_seconds(self) -> float:
        running = time.monotonic() - self._active_since if self._active_since else 0.0
        return self._active_s + running

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
                self._apply(run)
                # the reply to POST /runs may be a bare acknowledgement: only a poll ends a run
                if run is not initial and _finished(run):
                    self._over = True
                    return self._ended(self._from_run(run))
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
        if self._active_since is not None and self._stop_reason is None:
            delay = min(delay, max(self.request.timeout_s - self.active_seconds(), 0.0))
        if self._stop_deadline is not None:
            delay = min(delay, max(self._stop_deadline - now, 0.0))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=delay)
        self._wake.clear()

    async def _fetch(self) -> tuple[dict[str, Any] | None, RunResult | None]:
        """The run object, or the result that ends the run (lost, refused, unreachable)."""
        url = self.runner.url
        first_failure: float | None = None
        backoff = min(self.runner.poll_s, 0.25)
        while True:
            try:
                status, data = await self.runner.request("GET", self.path)
            except NETWORK_ERRORS as exc:
                problem = describe(exc)
            except DaemonProtocolError as exc:
                problem = str(exc)
            else:
                if status == 200 and isinstance(data, dict):
                    if first_failure is not None:
                        log.info("daemon run %s: the daemon at %s answers again", self.run_id, url)
                    return data, None
                if status == 404:
                    self._over = True
                    return None, self._failure(
                        "run_lost",
                        f"the Jazz daemon at {url} no longer knows run {self.run_id} "
                        "(it may have restarted)",
                    )
                if status in (401, 403):
                    return None, self._failure(
                        "daemon_refused",
                        f"the Jazz daemon at {url} refused to report run {self.run_id} "
                        f"(HTTP {status}){self.runner.detail(data)}; check runner.daemon_token",
                    )
                if status == 200:
                    problem = "a reply that is not a run object"
                elif status >= 500 or status == 429:
                    problem = f"HTTP {status}{self.runner.detail(data)}"
                else:
                    return None, self._failure(
                        "daemon_error",
                        f"the Jazz daemon at {url} answered HTTP {status} for run "
                        f"{self.run_id}{self.runner.detail(data)}",
                    )
            now = time.monotonic()
            if first_failure is None:
                first_failure = now
                log.warning(
                    "daemon run %s: cannot poll %s (%s); retrying", self.run_id, url, problem
                )
            if now - first_failure >= self.runner.unreachable_s:
                return None, self._failure(
                    "daemon_unreachable",
                    f"lost contact with the Jazz daemon at {url} for "
                    f"{self.runner.unreachable_s:g}s ({problem})",
                )
            if self._stop_deadline is not None and now >= self._stop_deadline:
                return None, self._unconfirmed()
            left = self.runner.unreachable_s - (now - first_failure)
            await asyncio.sleep(max(min(backoff, left), 0.0))
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _apply(self, run: dict[str, Any]) -> None:
        """Forward new events, surface new prompts, pause or resume the active clock."""
        events = run.get("events")
        if isinstance(events, list):
            for raw in events[self._seen :]:
                self._seen += 1
                if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
                    continue
                event = RunnerEvent(type=raw["type"], data=dict(raw))
                if event.type in PROMPT_EVENTS:
                    ident = event.data.get("toolCallId") or event.data.get("requestId")
                    if isinstance(ident, str):
                        if ident in self._surfaced:
                            continue
                        self._surfaced.add(ident)
                        self._pending.add(ident)
                elif event.type == "error":
                    message = event.data.get("message") or event.data.get("error")
                    if isinstance(message, str):
                        self._tail.append(message[:500])
                self._events.put_nowait(event)
        if not _finished(run):
            waiting_on: set[str] = set()  # the shown prompts the daemon still lists
            for item in _pending_items(run.get("pending")):
                prompt = _prompt_event(item)
                if prompt is None:
                    self._note_unshown(item)
                    continue
                ident = prompt.data.get("toolCallId") or prompt.data.get("requestId")
                if not isinstance(ident, str):
                    continue
                waiting_on.add(ident)
                if ident in self._surfaced:
                    continue
                self._surfaced.add(ident)
                self._pending.add(ident)
                self._events.put_nowait(prompt)
            if "pending" in run:
                # A prompt the daemon listed and lists no more was settled there (in Jazz's
                # own UI, by its own rules): it no longer holds the clock. One it never
                # listed (seen in the events first, or listed in a shape not read here)
                # keeps it: a person is still being asked.
                self._listed |= waiting_on
                self._pending -= self._listed - waiting_on
        # Only a prompt a person was shown stops the clock: a run parked on an item nobody
        # is asked (a file request) would otherwise wait, unanswerable, for ever.
        if run.get("state") in WAITING_STATES and self._pending:
            self._pause()
        else:
            self._resume()

    def _note_unshown(self, item: dict[str, Any]) -> None:
        """Say once per item that the run waits on something no person is asked."""
        kind = item.get("kind") or item.get("type")
        key = f"{kind}:{item.get('requestId') or item.get('toolCallId') or item.get('id')}"
        if key in self._unshown:
            return
        self._unshown.add(key)
        note = (
            f"the Jazz daemon waits on a {kind!s} request the gateway cannot show; "
            "its timeout still runs"
        )
        log.warning("daemon run %s: %s", self.run_id, note)
        self._tail.append(note[:500])

    # -- results ----------------------------------------------------------------------------

    def _duration_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    def _failure(self, code: str, error: str) -> RunResult:
        self._tail.append(error[:500])
        return RunResult(
            ok=False,
            code=code,
            error=error,
            duration_ms=self._duration_ms(),
            stderr_tail=list(self._tail),
        )

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

    def _from_run(self, run: dict[str, Any]) -> RunResult:
        state = run.get("state")
        error = run.get("error")
        if isinstance(error, dict):
            error = error.get("message")
        if isinstance(error, str) and error.strip():
            self._tail.append(error.strip()[:500])
        else:
            error = None
        envelope = run.get("envelope")
        if envelope is None:
            envelope = run.get("result")
        line: str | None = None
        if isinstance(envelope, dict):
            line = json.dumps(envelope)
        elif isinstance(envelope, str) and envelope.strip().startswith("{"):
            line = envelope.strip()
        if line is not None:
            return parse_envelope(
                line,
                exit_code=None,
                stderr_tail=list(self._tail),
                duration_ms=self._duration_ms(),
            )
        if state in CANCELLED_STATES:
            return self._failure("interrupted", error or "the run was cancelled on the daemon")
        if state in FAILED_STATES:
            return self._failure(
                "failed", error or "the Jazz daemon reported that the run failed, with no result"
            )
        return self._failure(
            "no_envelope", error or "the Jazz daemon reported the run finished without a result"
        )

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
        kind = frame.get("type")
        operator = False
        ident: Any
        body: dict[str, Any]
        if kind == "approval_decision":
            ident = frame.get("toolCallId")
            if frame.get("approved") is True:
                body = {"toolCallId": ident, "approved": True}
                operator = True
            else:
                body = {"toolCallId": ident, "approved": False, "note": "rejected in chat"}
        elif kind == "user_input_response":
            ident = frame.get("requestId")
            response = frame.get("response")
            body = {"requestId": ident, "response": response if isinstance(response, str) else ""}
            operator = True
        elif kind == "user_secret_response":
            ident = frame.get("requestId")
            value = frame.get("value")
            if isinstance(frame.get("unavailable"), str):
                note = f"unavailable: {frame['unavailable']}"
                body = {"requestId": ident, "approved": False, "note": note}
            elif isinstance(value, str) and frame.get("declined") is not True:
                body = {"requestId": ident, "secret": value}
                operator = True
            else:
                body = {"requestId": ident, "approved": False, "note": "declined"}
        else:
            log.warning("daemon run %s: unknown answer frame %r ignored", self.run_id, kind)
            return
        # The person has answered: their prompt no longer stops the clock, delivered or not.
        if isinstance(ident, str):
            self._pending.discard(ident)
        if not self._pending:
            self._resume()
        problem = await self._deliver(body, operator=operator)
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

    async def _deliver(self, body: dict[str, Any], *, operator: bool) -> str | None:
        """POST one answer, retrying transient failures; ``None`` once delivered, else why not.

        A 5xx, a 429 or a network failure is tried again (``ANSWER_ATTEMPTS`` in all, with a
        doubling pause); a 409 (nothing of that id pending) is no refusal; any other is final.
        The reason never carries the daemon's body: a daemon could echo the answer (a secret)
        back.
        """
        delay = ANSWER_BACKOFF_S
        problem = ""
        for attempt in range(1, ANSWER_ATTEMPTS + 1):
            if attempt > 1:
                if self._done.is_set():
                    break
                log.warning(
                    "daemon run %s: answer not delivered (%s); try %d of %d in %.2fs",
                    self.run_id,
                    problem,
                    attempt,
                    ANSWER_ATTEMPTS,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF_S)
            try:
                status, _ = await self.runner.request(
                    "POST", f"{self.path}/answer", body=body, operator=operator
                )
            except NETWORK_ERRORS as exc:
                problem = f"could not reach the Jazz daemon at {self.runner.url} ({describe(exc)})"
                continue
            except DaemonProtocolError as exc:
                problem = f"the Jazz daemon sent an unusable reply ({exc})"
                continue
            if status < 300:
                return None
            if status == ANSWERED_ALREADY:
                if attempt == 1:
                    log.info(
                        "daemon run %s: the answer came after the daemon settled its item "
                        "(HTTP %d); the run goes on",
                        self.run_id,
                        status,
                    )
                return None
            problem = (
                f"the Jazz daemon refused the answer (HTTP {status}){self._hint(status, operator)}"
            )
            if status < 500 and status not in TRANSIENT_STATUSES:
                return problem
        return f"{problem}; gave up after {ANSWER_ATTEMPTS} tries"

    def _hint(self, status: int, operator: bool) -> str:
        """What to check when the daemon refuses an answer for its credentials."""
        if status == 401 or (status == 403 and not operator):
            return "; check runner.daemon_token"
        if status != 403:
            return ""
        if self.runner.settings.daemon_operator_token is None:
            return (
                "; approving or answering needs the daemon's operator token: set "
                "runner.daemon_operator_token (JAZZ_BRIDGE_RUNNER__DAEMON_OPERATOR_TOKEN)"
            )
        return "; check runner.daemon_operator_token"

    async def _cancel(self) -> None:
        if self._cancel_sent:
            return
        self._cancel_sent = True
        self._stop_deadline = time.monotonic() + self.runner.stop_grace_s
        try:
            # bounded by the grace, not the 30 s request timeout: a Stop on a daemon that
            # hangs is answered (and the conversation freed) within it
            async with asyncio.timeout(self.runner.stop_grace_s):
                status = await self.runner.send_cancel(self.path)
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


def describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _run_path(run_id: str) -> str:
    return f"/runs/{quote(run_id, safe='')}"


def _listed_runs(data: Any) -> list[dict[str, Any]]:
    """The runs in a ``GET /runs`` answer: a list, or an object holding one under "runs"."""
    if isinstance(data, dict):
        data = data.get("runs")
    return [run for run in data if isinstance(run, dict)] if isinstance(data, list) else []


def _run_id(data: Any) -> str | None:
    if not isinstance(data, dict):
        return None
    for key in ("id", "runId"):
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
    return None


def _finished(run: dict[str, Any]) -> bool:
    state = run.get("state")
    if state in FINISHED_STATES:
        return True
    has_envelope = isinstance(run.get("envelope"), dict | str) or isinstance(
        run.get("result"), dict | str
    )
    return has_envelope and state not in ACTIVE_STATES


def _pending_items(pending: Any) -> list[dict[str, Any]]:
    if isinstance(pending, dict):
        return [pending]
    if isinstance(pending, list):
        return [p for p in pending if isinstance(p, dict)]
    return []


def _prompt_event(item: dict[str, Any]) -> RunnerEvent | None:
    """The CLI-shaped prompt event for one pending item of the daemon's run object."""
    raw_kind = item.get("kind") or item.get("type")
    kind = KIND_ALIASES.get(raw_kind.lower()) if isinstance(raw_kind, str) else None
    if kind is None:
        if "toolCallId" in item:
            kind = "approval"
        elif "question" in item:
            kind = "input"
        elif "name" in item and "requestId" in item:
            kind = "secret"
        else:
            return None
    event_type, id_key, keys = PROMPT_KINDS[kind]
    ident = item.get(id_key) or item.get("id")
    if isinstance(ident, int) and not isinstance(ident, bool):
        ident = str(ident)
    if not isinstance(ident, str) or not ident:
        return None
    data: dict[str, Any] = {"type": event_type, id_key: ident}
    if kind == "approval" and "toolName" not in item and isinstance(item.get("tool"), str):
        data["toolName"] = item["tool"]
    for key in keys:
        if key in item:
            data[key] = item[key]
    return RunnerEvent(type=event_type, data=data)
