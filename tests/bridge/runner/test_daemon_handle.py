"""The daemon backend against a fake ``jazz daemon`` (aiohttp on 127.0.0.1, port 0)."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from fake_daemon import OPERATOR, SUCCESS, TOKEN, WAIT, FakeDaemon, FakeRun, serving

from bridge.config import RunnerSettings
from bridge.errors import RunnerError
from bridge.runner.base import RunHandle, RunnerEvent, RunRequest, RunResult
from bridge.runner.daemon import DaemonRunner
from provisioning.accounts import Account
from provisioning.homes import Home
from provisioning.sandbox import RunIdentity


@pytest.fixture
async def daemon() -> AsyncIterator[FakeDaemon]:
    async with serving(FakeDaemon()) as fake:
        yield fake


def settings(url: str, **overrides: Any) -> RunnerSettings:
    values: dict[str, Any] = {
        "backend": "daemon",
        "daemon_url": url,
        "daemon_token": TOKEN,
        "daemon_operator_token": OPERATOR,
        "daemon_poll_s": 0.02,
        **overrides,
    }
    return RunnerSettings(**values)


@pytest.fixture
async def backend(daemon: FakeDaemon) -> AsyncIterator[DaemonRunner]:
    runner = DaemonRunner(settings(daemon.url), stop_grace_s=2.0)
    try:
        yield runner
    finally:
        await runner.close()


@pytest.fixture
def request_(tmp_path: Path) -> RunRequest:
    return make_request(tmp_path)


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


async def collect(
    handle: RunHandle, on_event: Callable[[RunnerEvent], Any] | None = None
) -> tuple[list[RunnerEvent], RunResult]:
    async def go() -> tuple[list[RunnerEvent], RunResult]:
        events = []
        async for event in handle.events():
            events.append(event)
            if on_event is not None:
                await on_event(event)
        return events, await handle.wait()

    return await asyncio.wait_for(go(), WAIT)


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


async def test_wrong_token_is_a_runner_error_naming_status_not_token(
    daemon: FakeDaemon, request_: RunRequest
) -> None:
    runner = DaemonRunner(settings(daemon.url, daemon_token="wrong-t0ken-value"))
    try:
        with pytest.raises(RunnerError) as info:
            await runner.start(request_)
    finally:
        await runner.close()
    message = str(info.value)
    assert "401" in message and daemon.url in message
    assert "wrong-t0ken-value" not in message and TOKEN not in message
    assert daemon.runs == {}


async def test_missing_token_is_refused_without_a_request(
    daemon: FakeDaemon, request_: RunRequest
) -> None:
    runner = DaemonRunner(settings(daemon.url, daemon_token=None))
    with pytest.raises(RunnerError, match="daemon_token"):
        await runner.start(request_)
    await runner.close()
    assert daemon.seen == []


async def test_unreachable_and_5xx_at_start_are_runner_errors(
    daemon: FakeDaemon, request_: RunRequest
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = DaemonRunner(settings(f"http://127.0.0.1:{port}"))
    with pytest.raises(RunnerError, match=f"127.0.0.1:{port}") as info:
        await dead.start(request_)
    assert TOKEN not in str(info.value)
    await dead.close()

    daemon.start_status = 503
    sad = DaemonRunner(settings(daemon.url))
    with pytest.raises(RunnerError, match="503") as info:
        await sad.start(request_)
    assert daemon.url in str(info.value)
    await sad.close()


async def test_approval_is_surfaced_once_and_approved_with_operator_token(
    daemon: FakeDaemon, backend: DaemonRunner, request_: RunRequest
) -> None:
    def park(run: FakeRun) -> None:
        run.state = "input-required"
        run.events.append({"type": "tool_call", "name": "bash"})
        run.pending = {
            "kind": "approval",
            "toolCallId": "tc-1",
            "toolName": "bash",
            "message": "Run `ls`?",
            "preview": "ls -la",
        }

    daemon.on_create = park
    handle = await backend.start(request_)

    async def on_event(event: RunnerEvent) -> None:
        if event.type == "approval_required":
            await daemon.wait_polls(3)  # still pending on the daemon: must not be re-emitted
            await handle.answer(
                {"type": "approval_decision", "toolCallId": "tc-1", "approved": True}
            )

    events, result = await collect(handle, on_event)

    assert [e.type for e in events] == ["tool_call", "approval_required", "approval_resolved"]
    assert events[1].data == {
        "type": "approval_required",
        "toolCallId": "tc-1",
        "toolName": "bash",
        "message": "Run `ls`?",
        "preview": "ls -la",
    }
    (answer,) = daemon.answers
    assert answer.path == "/runs/run-1/answer"
    assert answer.body == {"toolCallId": "tc-1", "approved": True}
    assert answer.headers["X-Jazz-Operator-Token"] == OPERATOR
    assert result.ok and result.answer == SUCCESS["answer"]


async def test_rejection_sends_a_note_and_no_operator_token(
    daemon: FakeDaemon, backend: DaemonRunner, request_: RunRequest
) -> None:
    def park(run: FakeRun) -> None:
        run.state = "input-required"
        run.pending = [{"toolCallId": "tc-9", "toolName": "rm"}]

    daemon.on_create = park
    handle = await backend.start(request_)

    async def on_event(event: RunnerEvent) -> None:
        if event.type == "approval_required":
            await handle.answer(
                {"type": "approval_decision", "toolCallId": "tc-9", "approved": False}
            )

    _, result = await collect(handle, on_event)
    (answer,) = daemon.answers
    assert answer.body == {"toolCallId": "tc-9", "approved": False, "note": "rejected in chat"}
    assert "X-Jazz-Operator-Token" not in answer.headers
    assert result.ok


async def test_question_is_answered_with_a_response(
    daemon: FakeDaemon, backend: DaemonRunner, request_: RunRequest
) -> None:
    suggestions = [{"value": "a", "label": "Option A"}, {"value": "b", "label": "Option B"}]

    def park(run: FakeRun) -> None:
        run.state = "input-required"
        run.pending = {
            "requestId": "q-1",
            "question": "Which one?",
            "suggestions": suggestions,
            "allowCustom": False,
        }

    daemon.on_create = park
    handle = await backend.start(request_)

    async def on_event(event: RunnerEvent) -> None:
        if event.type == "user_input_required":
            await handle.answer(
                {"type": "user_input_response", "requestId": "q-1", "response": "b"}
            )

    events, result = await collect(handle, on_event)
    prompts = [e for e in events if e.type == "user_input_required"]
    assert [p.data for p in prompts] == [
        {
            "type": "user_input_required",
            "requestId": "q-1",
            "question": "Which one?",
            "suggestions": suggestions,
            "allowCustom": False,
        }
    ]
    (answer,) = daemon.answers
    assert answer.body == {"requestId": "q-1", "response": "b"}
    assert answer.headers["X-Jazz-Operator-Token"] == OPERATOR
    assert result.ok


@pytest.mark.parametrize(
    ("frame", "body", "operator"),
    [
        ({"value": "hunter2"}, {"requestId": "s-1", "secret": "hunter2"}, True),
        ({"declined": True}, {"requestId": "s-1", "approved": False, "note": "declined"}, False),
        (
            {"unavailable": "shared-chat"},
            {"requestId": "s-1", "approved": False, "note": "unavailable: shared-chat"},
            False,
        ),
    ],
)
async def test_secret_answers(
    daemon: FakeDaemon,
    backend: DaemonRunner,
    request_: RunRequest,
    frame: dict[str, Any],
    body: dict[str, Any],
    operator: bool,
) -> None:
    def park(run: FakeRun) -> None:
        run.state = "input-required"
        run.pending = {"kind": "secret", "requestId": "s-1", "name": "GITHUB_TOKEN"}

    daemon.on_create = park
    handle = await backend.start(request_)

    async def on_event(event: RunnerEvent) -> None:
        if event.type == "user_secret_required":
            assert event.data == {
                "type": "user_secret_required",
                "requestId": "s-1",
                "name": "GITHUB_TOKEN",
            }
            await handle.answer({"type": "user_secret_response", "requestId": "s-1", **frame})

    _, result = await collect(handle, on_event)
    (answer,) = daemon.answers
    assert answer.body == body
    assert ("X-Jazz-Operator-Token" in answer.headers) is operator
    assert result.ok


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


async def test_close_stops_active_runs(daemon: FakeDaemon, request_: RunRequest) -> None:
    runner = DaemonRunner(settings(daemon.url), stop_grace_s=2.0)
    handle = await runner.start(request_)
    await asyncio.wait_for(runner.close(), WAIT)
    assert daemon.cancelled.is_set()
    result = await asyncio.wait_for(handle.wait(), WAIT)
    assert result.stopped and result.code == "interrupted"


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


def park_on(pending: dict[str, Any]) -> Callable[[FakeRun], None]:
    """A daemon run that parks at once, waiting on ``pending``."""

    def park(run: FakeRun) -> None:
        run.state = "input-required"
        run.pending = pending

    return park


def approve(handle: RunHandle) -> Callable[[RunnerEvent], Any]:
    """Answer the approval prompt ``tc-1`` with an approval, as a person in the chat would."""

    async def on_event(event: RunnerEvent) -> None:
        if event.type == "approval_required":
            await handle.answer(
                {"type": "approval_decision", "toolCallId": "tc-1", "approved": True}
            )

    return on_event


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


async def test_a_daemon_run_whose_answer_was_refused_is_not_polled_for_ever(
    daemon: FakeDaemon, tmp_path: Path
) -> None:
    """The person approves; the daemon refuses the answer (no operator token configured:
    HTTP 403). The engine has consumed the person's answer (the prompt is settled), so
    nobody is left to answer: the run must end (its timeout, or a failure naming the
    refusal), not stay parked with its clock paused, polled for ever."""
    daemon.on_create = park_on({"kind": "approval", "toolCallId": "tc-1", "toolName": "bash"})
    runner = DaemonRunner(settings(daemon.url, daemon_operator_token=None), stop_grace_s=1.0)
    try:
        handle = await runner.start(make_request(tmp_path, timeout_s=30))
        try:
            events, result = await collect(handle, approve(handle))
        finally:
            await asyncio.wait_for(handle.stop("test cleanup"), WAIT)
    finally:
        await runner.close()
    assert len(daemon.answers) == 1, "a refusal is not tried again"
    assert any(e.type == "error" for e in events)  # the refusal was told
    assert not result.ok and result.code == "answer_refused", result
    assert "HTTP 403" in (result.error or "")
    assert "runner.daemon_operator_token" in (result.error or "")
    assert daemon.cancelled.is_set()  # not left parked on the daemon


async def test_an_answer_the_daemon_fails_for_a_moment_is_tried_again(
    daemon: FakeDaemon, backend: DaemonRunner, tmp_path: Path
) -> None:
    """A 503 and a 429 are passing: the answer is sent again and the run goes on."""
    daemon.on_create = park_on({"kind": "approval", "toolCallId": "tc-1", "toolName": "bash"})
    daemon.answer_failures = [503, 429]
    handle = await backend.start(make_request(tmp_path))
    events, result = await collect(handle, approve(handle))
    assert len(daemon.answers) == 3
    assert not any(e.type == "error" for e in events)
    assert result.ok and result.answer == SUCCESS["answer"], result


async def test_an_answer_the_daemon_keeps_failing_ends_the_run(
    daemon: FakeDaemon, backend: DaemonRunner, tmp_path: Path
) -> None:
    """Retries are bounded: a daemon that keeps failing the answer ends the run, saying so."""
    daemon.on_create = park_on({"kind": "approval", "toolCallId": "tc-1", "toolName": "bash"})
    daemon.answer_failures = [500] * 10
    handle = await backend.start(make_request(tmp_path))
    _, result = await collect(handle, approve(handle))
    assert 1 < len(daemon.answers) < 10
    assert not result.ok and result.code == "answer_refused", result
    assert "HTTP 500" in (result.error or "") and "gave up" in (result.error or "")


async def _polls_or_cancel(daemon: FakeDaemon, polls: int) -> None:
    """``polls`` more polls of the run, or its cancel (a timeout), whichever comes first."""
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


async def _answer_late(
    daemon: FakeDaemon, handle: RunHandle, park: Any
) -> tuple[list[RunnerEvent], RunResult]:
    """The person is asked (approval ``tc-1``) and answers after ~0.5 s of polls, longer
    than the run's 0.3 s timeout; ``park(run)`` is what the daemon lists once it parks."""

    async def on_event(event: RunnerEvent) -> None:
        if event.type == "approval_required":
            park(daemon.run)
            await _polls_or_cancel(daemon, 25)  # ~0.5 s at 0.02 s polls
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
    ``_pending_items`` does not read (a wrapper object): the event's id keeps the clock
    paused while the person is asked (7b1ede3 had the run time out under them)."""

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
