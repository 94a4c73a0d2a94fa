"""One daemon run in flight (``bridge.runner.daemon_handle``) against a fake ``jazz daemon``:
its events in order, its result, its stop, its timeout (paused only while a person is
shown a prompt), and a daemon that fails or goes away mid-run.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from daemon_support import collect, make_request, park_on, polls_or_cancel, settings
from fake_daemon import SUCCESS, TOKEN, WAIT, FakeDaemon, FakeRun, serving

from bridge.runner.base import RunHandle, RunnerEvent, RunRequest, RunResult
from bridge.runner.daemon import DaemonRunner


async def test_success_forwards_events_in_order_and_parses_the_envelope(
    daemon: FakeDaemon, backend: DaemonRunner, request_: RunRequest
) -> None:
    handle = await backend.start(request_)
    await asyncio.wait_for(daemon.created.wait(), WAIT)
    run = daemon.run
    assert run.body == {
        "agent": "default",
        "prompt": "say hello",
        "conversationId": "web:local:c1#1",
    }
    run.events.append({"type": "stream_start"})
    await daemon.wait_polls(2)
    run.events.append({"type": "tool_call", "name": "bash"})
    run.events.append({"type": "text_chunk", "text": "Hel"})
    await daemon.wait_polls(2)
    run.events.append({"type": "complete"})
    run.events.append("not an event")  # type: ignore[arg-type]
    run.finish(SUCCESS)

    events, result = await collect(handle)

    assert [e.type for e in events] == ["stream_start", "tool_call", "text_chunk", "complete"]
    assert events[1].data == {"type": "tool_call", "name": "bash"}
    assert result.ok and result.answer == "Hello **there**"
    assert result.cost_usd == pytest.approx(0.0123) and result.cost_known
    assert (result.prompt_tokens, result.completion_tokens, result.total_tokens) == (100, 20, 120)
    assert result.tool_calls == SUCCESS["toolCalls"]
    assert not result.stopped and not result.timed_out
    # every request had the bearer token, none had an Origin, bodies were JSON
    assert daemon.seen and daemon.origins == []
    for seen in daemon.seen:
        assert seen.headers["Authorization"] == f"Bearer {TOKEN}"
        assert "Origin" not in seen.headers
        assert "X-Jazz-Operator-Token" not in seen.headers
    post = daemon.seen[0]
    assert (post.method, post.path) == ("POST", "/runs")
    assert post.headers["Content-Type"].startswith("application/json")


async def test_stop_cancels_and_reports_interrupted(
    daemon: FakeDaemon, backend: DaemonRunner, request_: RunRequest
) -> None:
    handle = await backend.start(request_)
    await daemon.wait_polls(1)
    await asyncio.wait_for(handle.stop("stopped"), WAIT)
    assert daemon.cancelled.is_set()
    assert [(s.method, s.path) for s in daemon.seen if "cancel" in s.path] == [
        ("POST", "/runs/run-1/cancel")
    ]
    _, result = await collect(handle)
    assert not result.ok and result.code == "interrupted" and result.stopped
    assert not result.timed_out
    await handle.stop()  # a second stop is a no-op


async def test_stop_falls_back_to_delete_when_cancel_is_404(
    daemon: FakeDaemon, backend: DaemonRunner, request_: RunRequest
) -> None:
    daemon.cancel_route = False
    handle = await backend.start(request_)
    await asyncio.wait_for(handle.stop("stopped"), WAIT)
    assert ("DELETE", "/runs/run-1") in [(s.method, s.path) for s in daemon.seen]
    result = await asyncio.wait_for(handle.wait(), WAIT)
    assert result.code == "interrupted" and result.stopped


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


async def test_timeout_stops_the_run(
    daemon: FakeDaemon, backend: DaemonRunner, tmp_path: Path
) -> None:
    handle = await backend.start(make_request(tmp_path, timeout_s=0.3))
    _, result = await collect(handle)
    assert daemon.cancelled.is_set()
    assert not result.ok and result.code == "timeout" and result.timed_out
    assert result.error == "the run took longer than 0.3s and was stopped"


async def test_waiting_for_a_person_does_not_count_against_the_timeout(
    daemon: FakeDaemon, backend: DaemonRunner, tmp_path: Path
) -> None:
    def park(run: FakeRun) -> None:
        run.state = "input-required"
        run.pending = {"toolCallId": "tc-1", "toolName": "bash"}

    daemon.on_create = park
    handle = await backend.start(make_request(tmp_path, timeout_s=0.3))

    async def on_event(event: RunnerEvent) -> None:
        if event.type == "approval_required":
            await daemon.wait_polls(25)  # ~0.5 s at 0.02 s polls, longer than the timeout
            await handle.answer(
                {"type": "approval_decision", "toolCallId": "tc-1", "approved": True}
            )

    _, result = await collect(handle, on_event)
    assert result.ok and not result.timed_out
    assert not daemon.cancelled.is_set()


async def test_a_daemon_run_waiting_on_a_prompt_nobody_is_shown_still_times_out(
    daemon: FakeDaemon, backend: DaemonRunner, tmp_path: Path
) -> None:
    """The daemon parks the run (``input-required``) on a pending item the backend does not
    turn into a prompt (a file request: the contract's ``{"filePath": ...}`` answer). No
    person is asked, so nobody can ever answer it; the timeout must still end the run
    instead of the run being polled for ever with its clock paused."""
    daemon.on_create = park_on({"kind": "file", "requestId": "f-1", "message": "Pick a file"})
    handle = await backend.start(make_request(tmp_path, timeout_s=0.3))
    try:
        events, result = await collect(handle)
    finally:
        await asyncio.wait_for(handle.stop("test cleanup"), WAIT)
    assert not any(e.type.endswith("_required") for e in events)  # nobody was asked
    assert not result.ok and result.timed_out, result
    assert any("file request" in line for line in result.stderr_tail)  # the logs say why


async def test_a_prompt_the_daemon_settles_itself_no_longer_stops_the_clock(
    daemon: FakeDaemon, backend: DaemonRunner, tmp_path: Path
) -> None:
    """A shown approval is settled by the daemon itself (answered in Jazz's own UI), and the
    run then parks on a file request nobody is shown. The approval left the daemon's
    ``pending``, so it no longer pauses the clock: the timeout ends the run (the backend
    kept its id as pending for good, and polled the run for ever)."""
    daemon.on_create = park_on({"toolCallId": "tc-1", "toolName": "bash"})
    handle = await backend.start(make_request(tmp_path, timeout_s=0.3))

    async def settled_elsewhere(event: RunnerEvent) -> None:
        if event.type == "approval_required":
            daemon.run.pending = {"kind": "file", "requestId": "f-1", "message": "Pick a file"}

    try:
        _, result = await collect(handle, settled_elsewhere)
    finally:
        await asyncio.wait_for(handle.stop("test cleanup"), WAIT)
    assert not result.ok and result.timed_out, result


async def _answer_late(
    daemon: FakeDaemon, handle: RunHandle, park: Any
) -> tuple[list[RunnerEvent], RunResult]:
    """The person is asked (approval ``tc-1``) and answers after ~0.5 s of polls, longer
    than the run's 0.3 s timeout; ``park(run)`` is what the daemon lists once it parks."""

    async def on_event(event: RunnerEvent) -> None:
        if event.type == "approval_required":
            park(daemon.run)
            await polls_or_cancel(daemon, 25)  # ~0.5 s at 0.02 s polls
            await handle.answer(
                {"type": "approval_decision", "toolCallId": "tc-1", "approved": True}
            )

    async def go() -> tuple[list[RunnerEvent], RunResult]:
        events = []
        async for event in handle.events():
            events.append(event)
            await on_event(event)
        return events, await handle.wait()

    return await asyncio.wait_for(go(), WAIT)


APPROVAL = {"type": "approval_required", "toolCallId": "tc-1", "toolName": "bash"}


async def test_a_prompt_seen_in_events_before_the_daemon_lists_it_still_stops_the_clock(
    daemon: FakeDaemon, backend: DaemonRunner, tmp_path: Path
) -> None:
    """The daemon's event stream shows the approval one poll before the run object lists
    it in ``pending`` (still ``[]`` while the run is ``running``): the person is being
    asked, so the clock stays paused (the id was dropped on that poll and never came back:
    the run timed out under them). Found by a review of 7b1ede3."""

    def first(run: FakeRun) -> None:
        run.events.append(dict(APPROVAL))
        run.pending = []  # nothing parked yet

    def parks(run: FakeRun) -> None:
        run.state = "input-required"
        run.pending = [{"kind": "approval", "toolCallId": "tc-1", "toolName": "bash"}]

    daemon.on_create = first
    handle = await backend.start(make_request(tmp_path, timeout_s=0.3))
    try:
        _, result = await _answer_late(daemon, handle, parks)
    finally:
        await asyncio.wait_for(handle.stop("test cleanup"), WAIT)
    assert not daemon.cancelled.is_set(), "the run was cancelled while a person was asked"
    assert result.ok and not result.timed_out, result


async def test_a_prompt_from_events_is_kept_when_pending_is_in_a_shape_not_parsed(
    daemon: FakeDaemon, backend: DaemonRunner, tmp_path: Path
) -> None:
    """The approval comes as an event; the daemon lists what is pending in a shape
    ``daemon_runs.pending_items`` does not read (a wrapper object): the event's id keeps
    the clock paused while the person is asked (7b1ede3 had the run time out under
    them)."""

    def first(run: FakeRun) -> None:
        run.state = "input-required"
        run.events.append(dict(APPROVAL))
        run.pending = {"approvals": [{"toolCallId": "tc-1", "toolName": "bash"}]}

    daemon.on_create = first
    handle = await backend.start(make_request(tmp_path, timeout_s=0.3))
    try:
        _, result = await _answer_late(daemon, handle, lambda run: None)
    finally:
        await asyncio.wait_for(handle.stop("test cleanup"), WAIT)
    assert not daemon.cancelled.is_set(), "the run was cancelled while a person was asked"
    assert result.ok and not result.timed_out, result


async def test_failure_envelope_is_a_failure_with_its_code(
    daemon: FakeDaemon, backend: DaemonRunner, request_: RunRequest
) -> None:
    daemon.on_create = lambda run: run.finish(
        {
            "ok": False,
            "code": "content_filtered",
            "error": "the provider filtered the answer",
            "costUSD": 0.002,
            "costKnown": True,
            "tokenUsage": {"promptTokens": 5, "completionTokens": 0, "totalTokens": 5},
        },
        state="failed",
    )
    handle = await backend.start(request_)
    _, result = await collect(handle)
    assert not result.ok and result.code == "content_filtered"
    assert result.error == "the provider filtered the answer"
    assert result.cost_usd == pytest.approx(0.002) and result.total_tokens == 5
    assert not result.stopped


async def test_failed_without_envelope_is_reported(
    daemon: FakeDaemon, backend: DaemonRunner, request_: RunRequest
) -> None:
    daemon.on_create = lambda run: setattr(run, "state", "failed")
    handle = await backend.start(request_)
    _, result = await collect(handle)
    assert not result.ok and result.code == "failed" and result.error


async def test_daemon_lost_mid_run_is_daemon_unreachable(
    tmp_path: Path, request_: RunRequest
) -> None:
    fake = FakeDaemon()
    app_runner = web.AppRunner(fake.app())
    await app_runner.setup()
    site = web.TCPSite(app_runner, "127.0.0.1", 0)
    await site.start()
    host, port = app_runner.addresses[0][:2]
    runner = DaemonRunner(settings(f"http://{host}:{port}"), unreachable_s=0.4)
    try:
        handle = await runner.start(request_)
        await fake.wait_polls(1)
        await app_runner.cleanup()  # the daemon goes away
        _, result = await collect(handle)
    finally:
        await runner.close()
    assert not result.ok and result.code == "daemon_unreachable"
    assert f"{host}:{port}" in (result.error or "")
    assert TOKEN not in (result.error or "")


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
