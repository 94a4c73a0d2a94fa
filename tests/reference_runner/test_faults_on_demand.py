"""Failures on demand: failure envelopes, crashes, garbage, junk on stdout, leftover
processes and a SIGTERM ignored (:mod:`reference_runner.faults`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from reference_support import once, prompt


@pytest.mark.parametrize(
    ("text", "exit_code", "code"),
    [
        ("!fail the disk is full", 1, "failed"),
        ("!empty", 1, "empty_response"),
        ("!crash", 3, None),
        ("!garbage", 1, None),
    ],
)
def test_failures(spawn: Any, tmp_path: Path, text: str, exit_code: int, code: str | None) -> None:
    res = once(spawn, text)
    assert res.code == exit_code
    if code is None:
        assert res.envelope is None
    else:
        assert res.envelope is not None and res.envelope["ok"] is False
        assert res.envelope["code"] == code and res.envelope["error"]
        assert {"costUSD", "costKnown", "tokenUsage"} <= set(res.envelope)
    if text == "!fail the disk is full":
        assert res.envelope is not None and res.envelope["error"] == "the disk is full"
    if text == "!crash":
        assert any(line.startswith("Traceback") for line in res.stderr)
    if text == "!garbage":
        assert res.stdout.strip() and not res.stdout.startswith("{")
    assert not (tmp_path / "history").exists()  # a failed run saves no history


def test_big_stdout_comes_before_the_envelope(spawn: Any) -> None:
    res = once(spawn, "!big-stdout 2")
    assert res.code == 0 and len(res.stdout) > 2 * 1024 * 1024
    assert res.envelope is not None and res.envelope["ok"] is True


def test_ignore_term_needs_sigkill(spawn: Any) -> None:
    runner = spawn(prompt("!ignore-term"), timeout_ms=200)
    runner.wait_event("log")
    runner.proc.send_signal(signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        runner.proc.wait(timeout=0.5)  # neither SIGTERM nor its own --timeout ends it
    runner.proc.kill()
    assert runner.finish().code == -signal.SIGKILL


def test_spawn_leaves_a_child_in_the_group_and_a_setsid_grandchild(spawn: Any) -> None:
    runner = spawn(prompt("!spawn 30"))
    pids = runner.wait_event("log")["pids"]
    try:
        child, grandchild = pids
        assert os.getpgid(child) == runner.proc.pid  # still in the run's process group
        assert os.getsid(grandchild) == grandchild  # left it with setsid
        assert runner.finish().code == 0
        os.kill(child, 0)
        os.kill(grandchild, 0)  # both outlive the runner
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
