"""A turn's answer and envelope, and the envelope a signal leaves (:mod:`reference_runner.run`)."""

from __future__ import annotations

import signal
from typing import Any

import pytest
from reference_support import once, prompt


def test_default_answer_and_envelope_fields(spawn: Any) -> None:
    res = once(spawn, "hello there\nsecond line")
    assert res.code == 0
    env = res.envelope
    assert env is not None and env["ok"] is True and env["finishReason"] == "stop"
    assert "reference runner, not an AI" in env["answer"]
    assert "> hello there\n> second line" in env["answer"]
    assert "Earlier turns in this conversation: 0." in env["answer"]
    assert env["costUSD"] == 0 and env["costKnown"] is False
    usage = env["tokenUsage"]
    assert usage["promptTokens"] == 4 and usage["completionTokens"] > 0
    assert usage["totalTokens"] == usage["promptTokens"] + usage["completionTokens"]
    assert env["toolCalls"] == [] and env["artifacts"] == []
    assert res.stdout.splitlines()[-1].startswith("{")  # the envelope is the last line
    assert res.types[0] == "stream_start" and res.types[-1] == "complete"
    assert any(line and not line.startswith("{") for line in res.stderr)  # log noise too


@pytest.mark.parametrize(("sig", "exit_code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signals_print_an_interrupted_envelope(spawn: Any, sig: int, exit_code: int) -> None:
    runner = spawn(prompt("!approve bash"))
    runner.wait_event("approval_required")
    runner.proc.send_signal(sig)
    res = runner.finish()
    assert res.code == exit_code and res.envelope is not None
    assert res.envelope["ok"] is False and res.envelope["code"] == "interrupted"
    assert res.envelope["signal"] == signal.Signals(sig).name
