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

This module is the backend itself: it starts runs, ends those a dead gateway left on the
daemon, waits for runs ended here to end there, and closes what is left at shutdown. The
HTTP is :mod:`.daemon_client`'s, one run in flight :mod:`.daemon_handle`'s, the run
objects' shapes :mod:`.daemon_runs`'.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Collection

import aiohttp

from ..config import RunnerSettings
from ..errors import RunnerError
from .base import RunHandle, RunnerBackend, RunRequest
from .daemon_client import (
    MAX_BACKOFF_S,
    NETWORK_ERRORS,
    DaemonClient,
    DaemonProtocolError,
    describe,
    run_path,
)
from .daemon_handle import DaemonRunHandle
from .daemon_runs import finished, listed_runs, run_id_of

log = logging.getLogger(__name__)

UNREACHABLE_S = 30.0  # how long a daemon may stop answering mid-run before we give up
STOP_GRACE_S = 10.0  # how long to wait for the daemon to confirm a cancel
SETTLE_WAIT_S = 60.0  # how long the next run waits for a stopped run the daemon still runs


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
        self.client = DaemonClient(settings)
        self.url = self.client.url
        self.poll_s = settings.daemon_poll_s
        self.unreachable_s = unreachable_s
        self.stop_grace_s = stop_grace_s
        self.settle_wait_s = settle_wait_s
        self._handles: set[DaemonRunHandle] = set()
        self._sweepers: set[asyncio.Task[None]] = set()

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
            status, data = await self.client.request("POST", "/runs", body=body)
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
                f"{self.client.detail(data)}; check runner.daemon_token"
            )
        if status >= 500:
            raise RunnerError(
                f"the Jazz daemon at {self.url} failed to start a run (HTTP {status})"
                f"{self.client.detail(data)}"
            )
        if status >= 300:
            raise RunnerError(
                f"the Jazz daemon at {self.url} rejected the run (HTTP {status})"
                f"{self.client.detail(data)}"
            )
        run_id = run_id_of(data)
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
                status, data = await self.client.request("GET", "/runs")
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
                self.client.detail(data),
            )
            return
        left = [
            run_id
            for run in listed_runs(data)
            if run.get("conversationId") in wanted
            and not finished(run)
            and (run_id := run_id_of(run)) is not None
        ]
        for run_id in left:
            log.warning("daemon run %s was left by the gateway's restart: cancelling it", run_id)
        await asyncio.gather(*(self.end_run(run_id) for run_id in left))

    async def end_run(self, run_id: str) -> bool:
        """Cancel the run until the daemon reports it over (bounded by ``settle_wait_s``);
        whether it did."""
        deadline = time.monotonic() + self.settle_wait_s
        delay = self.poll_s
        while not await self._gone(run_path(run_id)):
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
                    status, data = await self.client.request("GET", path)
                except aiohttp.ClientConnectorError:
                    return True
                if status == 404 or (status == 200 and isinstance(data, dict) and finished(data)):
                    return True
                if status == 200:
                    await self.client.send_cancel(path)
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
        await self.client.close()
