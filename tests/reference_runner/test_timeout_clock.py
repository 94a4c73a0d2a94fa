"""``--timeout`` ends a slow run, and time spent waiting for a person is not counted.

(:mod:`reference_runner.clock`.)
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from reference_support import once, prompt


def test_delay_shows_progress_and_the_timeout_ends_a_slow_run(spawn: Any) -> None:
    slow = spawn(prompt("!delay 0.5"), events="text")
    first = slow.wait_event("text_chunk")
    assert "working" in first["text"]
    res = slow.finish()
    assert res.code == 0 and res.types.count("usage_update") >= 2
    timed = once(spawn, "!delay 5", timeout_ms=300)
    assert timed.code == 1 and timed.envelope is not None
    assert timed.envelope["ok"] is False and timed.envelope["code"] == "failed"
    assert timed.envelope["error"].startswith("timed out after 300 ms")


def test_waiting_for_a_person_does_not_count_against_the_timeout(spawn: Any) -> None:
    runner = spawn(prompt("!approve bash"), timeout_ms=400)
    ask = runner.wait_event("approval_required")
    with pytest.raises(subprocess.TimeoutExpired):
        runner.proc.wait(timeout=0.8)  # the thing under test: time passes while a person thinks
    runner.send({"type": "approval_decision", "toolCallId": ask["toolCallId"], "approved": True})
    assert "bash was approved" in runner.finish().answer
