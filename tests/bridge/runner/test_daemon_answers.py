"""A person's answers to a daemon run's prompts (``bridge.runner.daemon_answers``): the body
each becomes, the operator token where it approves or answers, a daemon that settled the
item itself, fails for a moment, keeps failing or refuses.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from daemon_support import approve, collect, make_request, park_on, polls_or_cancel, settings
from fake_daemon import OPERATOR, SUCCESS, WAIT, FakeDaemon, FakeRun

from bridge.runner.base import RunnerEvent, RunRequest
from bridge.runner.daemon import DaemonRunner


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
        await polls_or_cancel(daemon, 3)
        if not daemon.cancelled.is_set():
            run.finish(SUCCESS)

    _, result = await collect(handle, on_event)
    assert not daemon.cancelled.is_set(), "a healthy run was cancelled"
    assert result.ok and result.answer == SUCCESS["answer"], result


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
