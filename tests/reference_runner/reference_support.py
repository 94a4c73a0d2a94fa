"""Helpers for the reference runner's tests: one runner process, its events and envelope.

Each test starts the runner as a real subprocess (``python -m reference_runner`` unless a
test gives another command) and reads what it prints. Every wait is bounded;
synchronisation is on the runner's own events, never on sleeps. The ``spawn`` fixture is
in this directory's ``conftest.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import stat
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ALL_EVENTS = "tools,reasoning,text,approval,subagent,spend"
WAIT = 10.0  # seconds: the bound on any single wait in these tests
REPO = Path(__file__).resolve().parents[2]  # where ``-m reference_runner`` finds it


def argv(
    conversation: str | None = "web:T1#1",
    events: str | None = ALL_EVENTS,
    timeout_ms: int = 20_000,
    extra: tuple[str, ...] = (),
) -> list[str]:
    args = ["run", "--json", "--no-tui", "--agent", "default"]
    if conversation is not None:
        args += ["--conversation", conversation]
    args += ["--approval-policy", "low-risk"]
    if events is not None:
        args += ["--events", events]
    args += ["--interactive-stdin", "--input-stdin", "--timeout", str(timeout_ms), *extra]
    return args


@dataclass
class Result:
    code: int
    stdout: str
    stderr: list[str]
    envelope: dict[str, Any] | None
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    @property
    def answer(self) -> str:
        assert self.envelope is not None and self.envelope["ok"] is True, self
        return str(self.envelope["answer"])


class Runner:
    """One runner process; stdout and stderr drained by threads so nothing blocks."""

    def __init__(
        self,
        home: Path | None,
        args: list[str],
        env: dict[str, str] | None = None,
        umask: int = 0o022,
        command: list[str] | None = None,
        cwd: Path = REPO,
    ) -> None:
        full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        if home is not None:
            full_env["JAZZ_HOME"] = str(home)
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [*(command or [sys.executable, "-m", "reference_runner"]), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
            umask=umask,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        self.out = bytearray()
        self._threads = [
            threading.Thread(target=self._drain_stderr, daemon=True),
            threading.Thread(target=self._drain_stdout, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.stderr.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def _drain_stdout(self) -> None:
        assert self.proc.stdout is not None
        while chunk := self.proc.stdout.read(65536):
            self.out += chunk

    def send(self, frame: dict[str, Any] | str) -> None:
        assert self.proc.stdin is not None
        line = frame if isinstance(frame, str) else json.dumps(frame)
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()

    def wait_event(self, type_: str, timeout: float = WAIT) -> dict[str, Any]:
        """The next event of this type on stderr (bounded)."""
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no {type_} event within {timeout}s") from None
            if line is None:
                raise AssertionError(f"stderr ended before a {type_} event: {self.stderr[-5:]}")
            event = parse_event(line)
            if event is not None and event["type"] == type_:
                return event

    def finish(self, timeout: float = WAIT) -> Result:
        self.close_stdin()
        code = self.proc.wait(timeout=timeout)
        for t in self._threads:
            t.join(timeout=timeout)
        stdout = self.out.decode("utf-8", "replace")
        envs = [line for line in stdout.splitlines() if line.startswith("{")]
        events = [e for e in map(parse_event, self.stderr) if e is not None]
        envelope = json.loads(envs[-1]) if envs else None
        return Result(code, stdout, self.stderr, envelope, events)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=WAIT)


def parse_event(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) and isinstance(event.get("type"), str) else None


def prompt(text: str, **extra: Any) -> dict[str, Any]:
    return {"prompt": text, **extra}


def once(spawn: Any, text: str, **kw: Any) -> Result:
    result: Result = spawn(prompt(text), **kw).finish()
    return result


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)
