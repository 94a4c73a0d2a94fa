"""Review of the daemon backend: what a person sees when the Jazz daemon misbehaves.

Against the shared fake ``jazz daemon`` (aiohttp on 127.0.0.1): an answer to a prompt the
daemon had settled itself, a Stop while the daemon hangs, a run the gateway gives up on.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from fake_daemon import OPERATOR, SUCCESS, TOKEN, WAIT, FakeDaemon, FakeRun, serving

from bridge.config import RunnerSettings
from bridge.runner.base import RunHandle, RunnerEvent, RunRequest, RunResult
from bridge.runner.daemon import DaemonRunner
from provisioning.accounts import Account
from provisioning.homes import Home
from provisioning.sandbox import RunIdentity


def settings(url: str) -> RunnerSettings:
    return RunnerSettings(
        backend="daemon",
        daemon_url=url,
        daemon_token=TOKEN,
        daemon_operator_token=OPERATOR,
        daemon_poll_s=0.02,
    )


def make_request(tmp_path: Path, timeout_s: float = 30.0) -> RunRequest:
    home = Home(
        thread_key="web:local:c1",
        name="web-local-c1",
        path=tmp_path,
        account=Account("me", os.getuid(), os.getgid()),
        operator_gid=os.getgid(),
        isolated=False,
    )
    return RunRequest(
        home=home,
        identity=RunIdentity(home=home, env={}, umask=0o077),
        conversation="web:local:c1#1",
        prompt="say hello",
        agent="default",
        approval_policy="low-risk",
        timeout_s=timeout_s,
    )


@pytest.fixture
async def daemon() -> AsyncIterator[FakeDaemon]:
    async with serving(FakeDaemon()) as fake:
        yield fake


@pytest.fixture
async def backend(daemon: FakeDaemon) -> AsyncIterator[DaemonRunner]:
    runner = DaemonRunner(settings(daemon.url), stop_grace_s=2.0)
    try:
        yield runner
    finally:
        await asyncio.wait_for(runner.close(), WAIT)


async def _polls_or_cancel(daemon: FakeDaemon, polls: int) -> None:
    """``polls`` more polls of the run, or its cancel, whichever comes first."""
    waits = [
        asyncio.ensure_future(daemon.wait_polls(polls)),
        asyncio.ensure_future(daemon.cancelled.wait()),
    ]
    try:
        await asyncio.wait(waits, timeout=WAIT, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


async def _drain(handle: RunHandle, on_event: Any) -> tuple[list[RunnerEvent], RunResult]:
    async def go() -> tuple[list[RunnerEvent], RunResult]:
        events = []
        async for event in handle.events():
            events.append(event)
            await on_event(event)
        return events, await handle.wait()

    return await asyncio.wait_for(go(), WAIT)


async def test_an_answer_to_a_prompt_the_daemon_settled_itself_does_not_cancel_the_run(
    daemon: FakeDaemon, backend: DaemonRunner, tmp_path: Path
) -> None:
    """The approval is shown in the chat; meanwhile it is settled on the daemon (answered
    in Jazz's own UI) and the run works on. The person then presses Approve: the daemon
    answers 409 (nothing of that id is pending). The run must go on and its answer reach
    the chat; it was cancelled as if the answer had been refused, and the person got
    'answer_refused' for a run that was doing fine."""

    def park(run: FakeRun) -> None:
        run.state = "input-required"
        run.pending = {"kind": "approval", "toolCallId": "tc-1", "toolName": "bash"}

    daemon.on_create = park
    handle = await backend.start(make_request(tmp_path))

    async def on_event(event: RunnerEvent) -> None:
        if event.type != "approval_required":
            return
        run = daemon.run
        run.state, run.pending = "running", []  # settled on the daemon itself
        await daemon.wait_polls(2)
        daemon.answer_failures = [409]
        await handle.answer({"type": "approval_decision", "toolCallId": "tc-1", "approved": True})
        await _polls_or_cancel(daemon, 3)
        if not daemon.cancelled.is_set():
            run.finish(SUCCESS)

    _, result = await _drain(handle, on_event)
    assert not daemon.cancelled.is_set(), "a healthy run was cancelled"
    assert result.ok and result.answer == SUCCESS["answer"], result


class HangingCancel(FakeDaemon):
    """A daemon that takes a cancel and never answers it (stuck, or busy tearing down)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def cancel(self, request: web.Request) -> web.Response:
        self.cancelled.set()
        await asyncio.wait_for(self.release.wait(), 60)
        return web.json_response({"ok": True})


STOP_GRACE_S = 0.5


async def test_stop_on_a_daemon_that_does_not_answer_the_cancel_is_answered_within_its_grace(
    tmp_path: Path,
) -> None:
    """The person presses Stop (or types /stop); the daemon takes the cancel and hangs.
    The stop must be over within the stop grace (the run reported interrupted, the /stop
    answered, the conversation free), not after the 30 s HTTP timeout of the cancel
    request on top of it."""
    fake = HangingCancel()
    async with serving(fake):
        runner = DaemonRunner(settings(fake.url), stop_grace_s=STOP_GRACE_S)
        try:
            handle = await runner.start(make_request(tmp_path))
            await fake.wait_polls(1)
            began = time.monotonic()
            stopping = asyncio.ensure_future(handle.stop("stopped"))
            done, _ = await asyncio.wait({stopping}, timeout=STOP_GRACE_S + 2.5)
            took = time.monotonic() - began
            fake.release.set()
            await asyncio.wait_for(stopping, WAIT * 8)
            assert done, f"stop took {took:.1f}s with a {STOP_GRACE_S}s grace"
            result = await asyncio.wait_for(handle.wait(), WAIT)
            assert not result.ok and result.code == "interrupted" and result.stopped, result
        finally:
            fake.release.set()
            await asyncio.wait_for(runner.close(), WAIT)


class FailingPolls(FakeDaemon):
    """A daemon whose run works on while every poll of it fails with ``status``."""

    def __init__(self, status: int) -> None:
        super().__init__()
        self.status = status

    async def get(self, request: web.Request) -> web.Response:
        return web.json_response({"error": "status store is sad"}, status=self.status)


@pytest.mark.parametrize("status", [500, 400])
async def test_a_run_the_gateway_gives_up_on_is_cancelled_on_the_daemon(
    tmp_path: Path, status: int
) -> None:
    """The daemon runs the turn but cannot report it (every poll a 5xx for longer than
    the gateway waits, or a 4xx). The gateway tells the person the run failed and frees
    the conversation; the run must not go on on the daemon, unseen: the person's next
    message would run beside it in the same conversation and fork its history, and its
    answer would never reach the chat."""
    fake = FailingPolls(status)
    async with serving(fake):
        runner = DaemonRunner(settings(fake.url), unreachable_s=0.3, stop_grace_s=STOP_GRACE_S)
        try:
            handle = await runner.start(make_request(tmp_path))
            result = await asyncio.wait_for(handle.wait(), WAIT)
        finally:
            await asyncio.wait_for(runner.close(), WAIT)
    assert not result.ok and result.code in ("daemon_unreachable", "daemon_error"), result
    cancels = [s for s in fake.seen if s.path.endswith("/cancel") or s.method == "DELETE"]
    assert cancels, f"run left running on the daemon after {result.code}"
    assert fake.run.state == "cancelled"


class SlowCancel(FakeDaemon):
    """A daemon that accepts a cancel and takes its time to end the run (a tool call it
    lets finish, a busy machine): the run stays ``running`` until the test ends it."""

    def _cancel(self, request: web.Request) -> web.Response:
        self.cancelled.set()
        return web.json_response({"ok": True})


async def test_the_next_run_waits_until_a_stopped_run_has_ended_on_the_daemon(
    tmp_path: Path,
) -> None:
    """Stop: the daemon takes the cancel but the run is still working when the stop grace
    is over. The person hears "stopped" and sends the next message; the engine awaits the
    handle's ``settled()`` before that run ("nothing the run started is left"). It
    returned at once, so the next run started beside the old one in the same
    conversation (forking its history); it must return only once the daemon reports the
    old run over."""
    fake = SlowCancel()
    async with serving(fake):
        runner = DaemonRunner(settings(fake.url), stop_grace_s=0.3)
        try:
            handle = await runner.start(make_request(tmp_path))
            await fake.wait_polls(1)
            await asyncio.wait_for(handle.stop("stopped"), WAIT)
            result = await asyncio.wait_for(handle.wait(), WAIT)
            assert result.code == "interrupted" and result.stopped, result
            assert fake.run.state == "running"  # not over on the daemon yet

            settling = asyncio.ensure_future(handle.settled())
            polled = asyncio.ensure_future(fake.wait_polls(3))  # it keeps asking the daemon
            await asyncio.wait({settling, polled}, timeout=WAIT, return_when="FIRST_COMPLETED")
            early = settling.done()
            polled.cancel()
            await asyncio.gather(polled, return_exceptions=True)
            fake.run.finish({"ok": False, "code": "interrupted", "error": "cancelled"}, "cancelled")
            await asyncio.wait_for(settling, WAIT)
            assert not early, "settled() returned while the run still worked on the daemon"
        finally:
            await asyncio.wait_for(runner.close(), WAIT)


async def test_a_run_of_a_daemon_that_is_gone_is_settled_at_once(tmp_path: Path) -> None:
    """The daemon went away mid-run (nothing listens at its address): no run is left
    working there, so the conversation's next message is not held back waiting for it."""
    fake = FakeDaemon()
    async with serving(fake):
        runner = DaemonRunner(settings(fake.url), unreachable_s=0.3, stop_grace_s=0.3)
        handle = await runner.start(make_request(tmp_path))
        await fake.wait_polls(1)
    try:  # the server is gone
        result = await asyncio.wait_for(handle.wait(), WAIT)
        assert result.code == "daemon_unreachable", result
        await asyncio.wait_for(handle.settled(), WAIT)
    finally:
        await asyncio.wait_for(runner.close(), WAIT)
