"""The CLI backend's run handle (``bridge.runner.cli_handle``) against small runners of the
test's own (real processes): what the contract allows a runner to do must never leave a run
without a timeout or an end."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from cli_run_support import own_request

from bridge.runner.base import RunResult
from bridge.runner.cli import CliRunner
from bridge.runner.cli_handle import CliRunHandle

BOUND_S = 20  # every wait below is bounded by this


def runner(tmp_path: Path, body: str) -> CliRunner:
    script = tmp_path / "runner.py"
    script.write_text("import json, sys, time\n" + body)
    return CliRunner([sys.executable, str(script)], kill_grace_s=0.5)


async def start(
    tmp_path: Path, r: CliRunner, prompt: str = "hi", timeout_s: float = 1.0
) -> CliRunHandle:
    request = own_request(tmp_path, "t", prompt=prompt, timeout_s=timeout_s)
    handle = await asyncio.wait_for(r.start(request), BOUND_S)
    assert isinstance(handle, CliRunHandle)
    return handle


async def finish(handle: CliRunHandle, answer: dict[str, object] | None = None) -> RunResult:
    """Read every event (answering the first prompt with ``answer``), then the result."""

    async def consume() -> None:
        async for event in handle.events():
            if answer is not None and event.type.endswith("_required"):
                await handle.answer(answer)

    await asyncio.wait_for(consume(), BOUND_S)
    result = await asyncio.wait_for(handle.wait(), BOUND_S)
    await asyncio.wait_for(handle.settled(), BOUND_S)
    return result


async def test_a_big_prompt_to_a_runner_that_reads_late_still_times_out(tmp_path: Path) -> None:
    # 300,000 characters: several times a pipe's buffer, unread for 30 s
    r = runner(tmp_path, "time.sleep(30)\nsys.stdin.readline()\n")
    try:
        handle = await start(tmp_path, r, prompt="é" * 300_000)
        result = await finish(handle)
        assert result.timed_out and not result.ok
    finally:
        await r.close()


async def test_envelope_lists_of_the_wrong_type_still_give_the_answer(tmp_path: Path) -> None:
    r = runner(
        tmp_path,
        "sys.stdin.readline()\n"
        'print(json.dumps({"ok": True, "answer": "hi", "toolCalls": 5, "artifacts": True}))\n',
    )
    try:
        result = await finish(await start(tmp_path, r, timeout_s=10))
        assert result.ok and result.answer == "hi"
        assert result.tool_calls == [] and result.artifacts == []
    finally:
        await r.close()


ASK_THEN_HANG = """
sys.stdin.readline()
sys.stderr.write(json.dumps(EVENT) + "\\n")
sys.stderr.flush()
sys.stdin.readline()  # the person's answer
time.sleep(60)  # then hangs: only the timeout ends it
"""


async def test_a_question_answered_by_its_request_id_lets_the_timeout_run_again(
    tmp_path: Path,
) -> None:
    event = {"type": "user_input_required", "requestId": "q1", "toolCallId": "call-9"}
    r = runner(tmp_path, f"EVENT = {event!r}\n{ASK_THEN_HANG}")
    try:
        handle = await start(tmp_path, r)
        answer = {"type": "user_input_response", "requestId": "q1", "response": "blue"}
        result = await finish(handle, answer)
        assert result.timed_out, result
    finally:
        await r.close()


async def test_an_approval_the_runner_settles_itself_lets_the_timeout_run_again(
    tmp_path: Path,
) -> None:
    r = runner(
        tmp_path,
        "sys.stdin.readline()\n"
        'for e in ({"type": "approval_required", "toolCallId": "a1"},'
        ' {"type": "approval_resolved", "toolCallId": "a1", "approved": False}):\n'
        '    sys.stderr.write(json.dumps(e) + "\\n")\n'
        "sys.stderr.flush()\n"
        "time.sleep(60)\n",
    )
    try:
        result = await finish(await start(tmp_path, r))  # nobody answers: it settled it
        assert result.timed_out, result
    finally:
        await r.close()


APPROVE_WITHOUT_READING_STDIN = """
# never reads stdin (not even the prompt), asks for an approval, then hangs
sys.stderr.write(json.dumps({"type": "approval_required", "toolCallId": "a1"}) + "\\n")
sys.stderr.flush()
time.sleep(120)
"""


async def test_an_answer_to_a_runner_that_never_reads_stdin_does_not_hang_the_run(
    tmp_path: Path,
) -> None:
    """A prompt bigger than the pipe, a runner that never reads stdin and asks a person:
    the person's answer must not block the engine, and the timeout must run again once the
    person has answered (not stay paused for ever)."""
    r = runner(tmp_path, APPROVE_WITHOUT_READING_STDIN)
    try:
        handle = await start(tmp_path, r, prompt="x" * 1_000_000, timeout_s=0.5)
        answers: list[asyncio.Task[None]] = []

        async def consume() -> None:
            async for event in handle.events():
                if event.type == "approval_required":
                    frame = {"type": "approval_decision", "toolCallId": "a1", "approved": True}
                    answers.append(asyncio.create_task(handle.answer(frame)))

        consumer = asyncio.create_task(consume())
        try:
            result = await asyncio.wait_for(handle.wait(), BOUND_S)
        finally:
            if handle.proc.returncode is None:
                await handle.stop("test cleanup")
            await asyncio.wait_for(consumer, BOUND_S)
            await asyncio.wait_for(asyncio.gather(*answers), BOUND_S)
            await asyncio.wait_for(handle.settled(), BOUND_S)
        assert answers, "the person was asked"
        assert result.timed_out and not result.ok, result
    finally:
        await r.close()


ANSWER_THEN_LINGER = """
sys.stdin.readline()
envelope = {"ok": True, "answer": "the answer", "costUSD": 0.5, "costKnown": True,
            "tokenUsage": {"promptTokens": 1, "completionTokens": 1, "totalTokens": 2},
            "toolCalls": [], "artifacts": []}
sys.stdout.write(json.dumps(envelope) + "\\n")
sys.stdout.flush()
time.sleep(60)  # slow to exit after answering (a history save, a hung provider socket)
"""


async def test_an_answer_printed_in_time_is_not_replaced_by_a_timeout(tmp_path: Path) -> None:
    """The runner printed its success envelope well within the timeout and was then slow to
    exit; the backstop ends it. The answer (and its spend) is the run's result, as it is for
    a /stop that comes as the runner exits (``finalize``'s own rule): the runner has that
    exchange in its history, so dropping it leaves the chat and the history apart."""
    r = runner(tmp_path, ANSWER_THEN_LINGER)
    try:
        handle = await start(tmp_path, r, timeout_s=0.5)
        result = await asyncio.wait_for(handle.wait(), BOUND_S)
        await asyncio.wait_for(handle.settled(), BOUND_S)
        assert result.ok and result.answer == "the answer", result
        assert result.cost_usd == 0.5
        assert result.timed_out  # the backstop ended it: the logs still say so
        assert handle.proc.returncode is not None  # and the lingering runner was killed
    finally:
        await r.close()
