"""Approvals, questions and secrets: asked on stderr, answered on stdin, or unanswered.

(:mod:`reference_runner.people`.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from reference_support import Runner, argv, once, prompt


@pytest.mark.parametrize("approved", [True, False])
def test_an_approval_answered_on_stdin(spawn: Any, approved: bool) -> None:
    runner = spawn(prompt("please !approve deploy"))
    ask = runner.wait_event("approval_required")
    assert ask["toolName"] == "deploy" and ask["message"] and ask["preview"]
    runner.send(
        {"type": "approval_decision", "toolCallId": ask["toolCallId"], "approved": approved}
    )
    res = runner.finish()
    assert f"deploy was {'approved' if approved else 'declined'}" in res.answer
    (resolved,) = [e for e in res.events if e["type"] == "approval_resolved" and "auto" not in e]
    assert resolved == {
        "type": "approval_resolved",
        "toolCallId": ask["toolCallId"],
        "approved": approved,
    }


def test_two_approvals_are_pending_at_once(spawn: Any) -> None:
    runner = spawn(prompt("!approve2 deploy"))
    first = runner.wait_event("approval_required")
    second = runner.wait_event("approval_required")  # before either is answered
    assert first["toolCallId"] != second["toolCallId"]
    assert (first["toolName"], second["toolName"]) == ("deploy", "write")
    runner.send("this line is not JSON and is ignored")
    runner.send({"type": "something_else", "id": 1})
    runner.send(
        {"type": "approval_decision", "toolCallId": second["toolCallId"], "approved": False}
    )
    runner.send({"type": "approval_decision", "toolCallId": first["toolCallId"], "approved": True})
    res = runner.finish()
    assert "deploy was approved" in res.answer and "write was declined" in res.answer
    assert res.envelope is not None and [c["name"] for c in res.envelope["toolCalls"]] == ["deploy"]


def test_stdin_eof_while_waiting_declines(spawn: Any) -> None:
    runner = spawn(prompt("!approve bash !ask colour? !secret TOKEN"))
    runner.wait_event("approval_required")
    runner.close_stdin()
    res = runner.finish()
    assert "bash was declined" in res.answer
    assert "the question was declined" in res.answer
    assert "no secret is available here (stdin closed)" in res.answer


def test_auto_approved_tools_and_the_read_only_policy(spawn: Any, tmp_path: Path) -> None:
    res = once(spawn, "!approve2 deploy", extra=("--auto-approve-tools", "deploy,write"))
    assert "deploy was approved" in res.answer and "write was approved" in res.answer
    assert "approval_required" not in res.types
    runner = Runner(
        tmp_path,
        [*argv(), "--approval-policy", "read-only"],  # the last one given wins
    )
    try:
        runner.send(prompt("!approve bash"))
        res = runner.finish()
    finally:
        runner.kill()
    assert "bash was declined" in res.answer and "approval_required" not in res.types


def test_a_question(spawn: Any) -> None:
    runner = spawn(prompt("!ask favourite colour?"))
    ask = runner.wait_event("user_input_required")
    assert ask["question"] == "favourite colour?" and ask["allowCustom"] is True
    assert {"value": "blue", "label": "Blue"} in ask["suggestions"]
    runner.send({"type": "user_input_response", "requestId": ask["requestId"], "response": "teal"})
    assert "you answered: teal" in runner.finish().answer


@pytest.mark.parametrize(
    ("answer", "expect"),
    [
        ({"value": "hunter2-very-secret"}, "got a secret of 19 characters (not shown)"),
        ({"declined": True}, "the secret was declined"),
        ({"unavailable": "shared-chat"}, "no secret is available here (shared-chat)"),
    ],
)
def test_a_secret_is_never_echoed(
    spawn: Any, tmp_path: Path, answer: dict[str, Any], expect: str
) -> None:
    runner = spawn(prompt("!secret API token"))
    ask = runner.wait_event("user_secret_required")
    assert ask["name"] == "API token" and ask["message"]
    runner.send({"type": "user_secret_response", "requestId": ask["requestId"], **answer})
    res = runner.finish()
    assert expect in res.answer
    everything = res.stdout + "\n".join(res.stderr)
    everything += "".join(p.read_text() for p in (tmp_path / "history").iterdir())
    assert "hunter2" not in everything


def test_park_exits_2_when_a_person_is_needed(spawn: Any, tmp_path: Path) -> None:
    res = once(spawn, "!ask colour?", extra=("--park",))
    assert res.code == 2 and res.envelope is not None
    assert res.envelope["ok"] is False and res.envelope["parked"] is True
    assert res.envelope["pending"][0]["type"] == "user_input_required"
    assert not (tmp_path / "history").exists()  # nothing saved: the run has not finished


def test_without_interactive_stdin_prompts_go_unanswered(tmp_path: Path) -> None:
    runner = Runner(tmp_path, [a for a in argv() if a != "--interactive-stdin"])
    try:
        runner.send(prompt("!approve bash !secret TOKEN"))
        res = runner.finish()
    finally:
        runner.kill()
    assert "bash was declined" in res.answer
    assert "no secret is available here (not interactive)" in res.answer
    assert "approval_required" not in res.types and "user_secret_required" not in res.types
