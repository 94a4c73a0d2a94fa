"""stdin: the first line must be the prompt; a later line nobody can use is ignored.

(:mod:`reference_runner.stdin`.)

A line nested deeper than the JSON decoder's stack (``[[[[…``) raised RecursionError, which
is no ValueError: it killed the thread reading stdin, the pending approval was declined as
if stdin had closed, and the person's real answer a moment later was never read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from reference_support import Runner, argv, prompt


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


@pytest.mark.parametrize(
    ("first_line", "needle"),
    [
        ("not json", "first stdin line"),
        ('{"text": "no prompt"}', "first stdin line"),
        ('["prompt"]', "first stdin line"),
        ('{"prompt": 3}', "first stdin line"),
        ('{"prompt": "x", "history": []}', "--ephemeral"),
        ("", "no first stdin line"),
    ],
)
def test_a_bad_first_stdin_line_is_a_failure_envelope(
    spawn: Any, first_line: str, needle: str
) -> None:
    runner = spawn(*([first_line] if first_line else []))
    res = runner.finish()
    assert res.code == 1 and res.envelope is not None and res.envelope["ok"] is False
    assert res.envelope["code"] == "failed" and needle in res.envelope["error"]
    assert res.envelope["costUSD"] == 0 and res.envelope["costKnown"] is False


def test_attachments_are_reported(spawn: Any, tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("12345")
    res = spawn(prompt("see file", attachments=[str(tmp_path / "in.txt")])).finish()
    assert "Attachments: 1." in res.answer and "in.txt: 5 bytes" in res.answer
    bad = spawn(prompt("x", attachments="in.txt")).finish()
    assert bad.code == 1 and bad.envelope is not None and "attachments" in bad.envelope["error"]
