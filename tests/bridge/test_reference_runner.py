"""The bundled reference runner speaks the jazz run contract (real subprocesses)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ARGS = [
    "run",
    "--json",
    "--no-tui",
    "--agent",
    "default",
    "--approval-policy",
    "low-risk",
    "--events",
    "tools,approval",
    "--interactive-stdin",
    "--input-stdin",
    "--timeout",
    "20000",
]


def start(home: Path, conversation: str = "web:t#1") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bridge.reference_runner", *ARGS, "--conversation", conversation],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"JAZZ_HOME": str(home), "PATH": os.environ["PATH"]},
    )


def run(
    home: Path, prompt: str, *frames: dict[str, object], conversation: str = "web:t#1"
) -> tuple[int, dict[str, object] | None, list[dict[str, object]], str]:
    proc = start(home, conversation)
    stdin = json.dumps({"prompt": prompt}) + "\n" + "".join(json.dumps(f) + "\n" for f in frames)
    out, err = proc.communicate(stdin, timeout=30)
    envs = [line for line in out.splitlines() if line.startswith("{")]
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    return proc.returncode, (json.loads(envs[-1]) if envs else None), events, out


def test_default_answer_history_and_modes(tmp_path: Path) -> None:
    code, env, _, _ = run(tmp_path, "hello there")
    assert code == 0 and env is not None and env["ok"] is True
    assert "not an AI" in str(env["answer"]) and "Earlier turns in this conversation: 0" in str(
        env["answer"]
    )
    assert env["costKnown"] is False and env["costUSD"] == 0
    _, env2, _, _ = run(tmp_path, "again")
    assert "Earlier turns in this conversation: 1" in str(env2 and env2["answer"])
    _, env3, _, _ = run(tmp_path, "other", conversation="web:t#2")
    assert "Earlier turns in this conversation: 0" in str(env3 and env3["answer"])
    (history,) = [p for p in (tmp_path / "history").iterdir() if p.name.startswith("web-t-1")]
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "history").stat().st_mode) == 0o700


def test_setgid_home_keeps_group_read(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o2750)
    run(tmp_path, "hi")
    history = next((tmp_path / "history").iterdir())
    assert stat.S_IMODE(history.stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "history").stat().st_mode) & 0o750 == 0o750


def test_tools_events_are_filtered(tmp_path: Path) -> None:
    _, env, events, _ = run(tmp_path, "!tools 2 !subagent")
    types = {e["type"] for e in events}
    assert "tool_execution_start" in types and "subagent_start" not in types  # not asked for
    assert env is not None and len(env["toolCalls"]) == 2  # type: ignore[arg-type]


def test_approval_frames(tmp_path: Path) -> None:
    proc = start(tmp_path)
    assert proc.stdin and proc.stderr and proc.stdout
    proc.stdin.write(json.dumps({"prompt": "!approve bash"}) + "\n")
    proc.stdin.flush()
    while True:
        line = proc.stderr.readline()
        assert line, "no approval_required event"
        if line.startswith("{") and json.loads(line)["type"] == "approval_required":
            ident = json.loads(line)["toolCallId"]
            break
    proc.stdin.write(
        json.dumps({"type": "approval_decision", "toolCallId": ident, "approved": False}) + "\n"
    )
    proc.stdin.close()
    out = proc.stdout.read()
    proc.wait(timeout=20)
    assert "bash was declined" in json.loads(out.splitlines()[-1])["answer"]


@pytest.mark.parametrize(
    ("prompt", "exit_code", "code"),
    [
        ("!fail nope", 1, "failed"),
        ("!empty", 1, "empty_response"),
        ("!crash", 3, None),
        ("!garbage", 1, None),
    ],
)
def test_failures(tmp_path: Path, prompt: str, exit_code: int, code: str | None) -> None:
    rc, env, _, _ = run(tmp_path, prompt)
    assert rc == exit_code
    if code is None:
        assert env is None
    else:
        assert env is not None and env["ok"] is False and env["code"] == code


def test_sigterm_prints_an_interrupted_envelope(tmp_path: Path) -> None:
    proc = start(tmp_path)
    assert proc.stdin and proc.stderr
    proc.stdin.write(json.dumps({"prompt": "!approve bash"}) + "\n")
    proc.stdin.flush()
    while "approval_required" not in proc.stderr.readline():
        pass
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 143
    env = json.loads(out.splitlines()[-1])
    assert env["code"] == "interrupted" and env["signal"] == "SIGTERM"


def test_bad_first_line_and_missing_home(tmp_path: Path) -> None:
    proc = start(tmp_path)
    out, _ = proc.communicate("not json\n", timeout=20)
    assert proc.returncode == 1 and '"ok": false' in out
    bare = subprocess.run(
        [sys.executable, "-m", "bridge.reference_runner", *ARGS],
        input='{"prompt": "x"}\n',
        capture_output=True,
        text=True,
        timeout=20,
        env={"PATH": os.environ["PATH"]},
    )
    assert bare.returncode == 1 and "JAZZ_HOME" in bare.stdout
