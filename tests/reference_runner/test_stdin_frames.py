"""A malformed stdin line is ignored; the person's later answer still counts.

A line nested deeper than the JSON decoder's stack (``[[[[…``) raised RecursionError, which
is no ValueError: it killed the thread reading stdin, the pending approval was declined as
if stdin had closed, and the person's real answer a moment later was never read.
"""

from __future__ import annotations

from pathlib import Path

from test_reference_runner import Runner, argv, prompt


def test_a_deeply_nested_line_does_not_stop_the_answers(tmp_path: Path) -> None:
    runner = Runner(tmp_path, argv())
    try:
        runner.send(prompt("!approve bash"))
        asked = runner.wait_event("approval_required")
        runner.send("[" * 100_000)
        runner.send({"type": "not-an-answer", "toolCallId": asked["toolCallId"]})
        runner.send(
            {"type": "approval_decision", "toolCallId": asked["toolCallId"], "approved": True}
        )
        resolved = runner.wait_event("approval_resolved")
        res = runner.finish()
    finally:
        runner.kill()
    print(resolved, [line for line in res.stderr if "Error" in line][-1:])
    assert resolved["approved"] is True
    assert "bash was approved" in res.answer
