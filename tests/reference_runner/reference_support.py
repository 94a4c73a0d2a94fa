"""The bundled reference runner speaks the ``jazz run`` contract (real subprocesses).

Every wait is bounded; synchronisation is on the runner's own events, never on sleeps.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bridge import reference_runner

ALL_EVENTS = "tools,reasoning,text,approval,subagent,spend"
WAIT = 10.0  # seconds: the bound on any single wait in these tests


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
    ) -> None:
        full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        if home is not None:
            full_env["JAZZ_HOME"] = str(home)
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [*(command or [sys.executable, "-m", "bridge.reference_runner"]), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
            cwd=Path(__file__).resolve().parents[2],
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


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Any]:
    started: list[Runner] = []

    def start(*frames: dict[str, Any] | str, home: Path | None = tmp_path, **kw: Any) -> Runner:
        env = kw.pop("env", None)
        umask = kw.pop("umask", 0o022)
        command = kw.pop("command", None)
        runner = Runner(home, argv(**kw), env=env, umask=umask, command=command)
        started.append(runner)
        for frame in frames:
            runner.send(frame)
        return runner

    yield start
    for runner in started:
        runner.kill()


def prompt(text: str, **extra: Any) -> dict[str, Any]:
    return {"prompt": text, **extra}


def once(spawn: Any, text: str, **kw: Any) -> Result:
    result: Result = spawn(prompt(text), **kw).finish()
    return result


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- answers, envelopes, history -------------------------------------------------------------


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


def test_the_console_script_speaks_the_contract_too(spawn: Any) -> None:
    script = Path(sys.executable).with_name("jazz-reference-runner")
    if not script.exists():
        pytest.skip("console script not installed")
    res = spawn(prompt("hi"), command=[str(script)]).finish()
    assert res.code == 0 and "not an AI" in res.answer


def test_history_grows_per_conversation_and_keys_are_separate(spawn: Any, tmp_path: Path) -> None:
    key = "slack:T1:C2:1700000000.000100#1"
    assert "Earlier turns in this conversation: 0." in once(spawn, "one", conversation=key).answer
    assert "Earlier turns in this conversation: 1." in once(spawn, "two", conversation=key).answer
    other = once(spawn, "three", conversation="slack:T1:C2:1700000000.000100#2")
    assert "Earlier turns in this conversation: 0." in other.answer  # a new epoch starts fresh
    files = sorted((tmp_path / "history").iterdir())
    assert len(files) == 2
    for f in files:
        assert all(c in "abcdefghijklmnopqrstuvwxyz0123456789._-" for c in f.name)
    history = json.loads(
        (tmp_path / "history" / f"{reference_runner.safe_name(key)}.json").read_text()
    )
    assert [h["role"] for h in history] == ["user", "assistant", "user", "assistant"]
    assert [h["content"] for h in history[::2]] == ["one", "two"]
    assert not [p for p in (tmp_path / "history").iterdir() if ".tmp-" in p.name]


def test_safe_names_are_distinct_and_safe() -> None:
    a, b = reference_runner.safe_name("A:b/../c"), reference_runner.safe_name("a:b/../c")
    assert a != b and "/" not in a and ".." not in a.split("-")[0]
    assert reference_runner.safe_name("").startswith("conversation-")


def test_ephemeral_takes_history_from_stdin_and_saves_nothing(spawn: Any, tmp_path: Path) -> None:
    history = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}] * 2
    res = spawn(prompt("x", history=history), conversation=None, extra=("--ephemeral",)).finish()
    assert "Earlier turns in this conversation: 2." in res.answer
    assert not (tmp_path / "history").exists()


def test_corrupt_history_is_moved_aside(spawn: Any, tmp_path: Path) -> None:
    (tmp_path / "history").mkdir(mode=0o700)
    path = tmp_path / "history" / f"{reference_runner.safe_name('web:T1#1')}.json"
    path.write_text("{not json")
    res = once(spawn, "hi")
    assert "Earlier turns in this conversation: 0." in res.answer
    assert [p.name for p in path.parent.iterdir() if ".corrupt-" in p.name]
    assert any("moved to" in line for line in res.stderr)


def test_modes_in_a_private_home(spawn: Any, tmp_path: Path) -> None:
    once(spawn, "hi !artifact note.txt", umask=0o000)
    (history,) = (tmp_path / "history").iterdir()
    assert mode(history) == 0o600 and mode(tmp_path / "history") == 0o700
    assert mode(tmp_path / "workspace" / "note.txt") == 0o600


def test_modes_in_a_setgid_home_keep_group_read(spawn: Any, tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o2750)
    once(spawn, "hi !artifact plot.png", umask=0o077)  # the umask must not take group read
    (history,) = (tmp_path / "history").iterdir()
    assert mode(history) == 0o640
    assert mode(tmp_path / "history") == 0o2750  # setgid inherited, other bits cleared
    assert mode(tmp_path / "workspace" / "plot.png") == 0o640


# -- events ----------------------------------------------------------------------------------


def test_events_are_filtered_by_category(spawn: Any) -> None:
    res = once(spawn, "!tools 2 !subagent !cost 0.5", events="tools")
    types = set(res.types)
    assert {"tools_detected", "tool_call", "tool_execution_start", "tool_execution_complete"} <= (
        types
    )
    assert {"stream_start", "usage_update", "complete"} <= types  # usage always comes
    assert not types & {"thinking_start", "subagent_start", "text_chunk", "run_spend"}
    env = res.envelope
    assert env is not None and [c["name"] for c in env["toolCalls"]] == ["read_file", "bash"]
    assert all(isinstance(json.loads(c["arguments"]), dict) for c in env["toolCalls"])
    assert env["costUSD"] == 0.5 and env["costKnown"] is True


def test_every_category_when_asked(spawn: Any) -> None:
    res = once(spawn, "!tools 1 !subagent !cost 0.25")
    types = set(res.types)
    assert {"thinking_start", "thinking_chunk", "thinking_complete"} <= types
    assert {"subagent_start", "subagent_complete", "text_start", "text_chunk"} <= types
    (spend,) = [e for e in res.events if e["type"] == "run_spend"]
    assert spend["costUSD"] == 0.25 and spend["costKnown"] is True


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


# -- people: approvals, questions, secrets -----------------------------------------------------


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


def test_waiting_for_a_person_does_not_count_against_the_timeout(spawn: Any) -> None:
    runner = spawn(prompt("!approve bash"), timeout_ms=400)
    ask = runner.wait_event("approval_required")
    with pytest.raises(subprocess.TimeoutExpired):
        runner.proc.wait(timeout=0.8)  # the thing under test: time passes while a person thinks
    runner.send({"type": "approval_decision", "toolCallId": ask["toolCallId"], "approved": True})
    assert "bash was approved" in runner.finish().answer


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


# -- artifacts and answers for other tests -----------------------------------------------------


def test_artifacts_are_written_and_listed(spawn: Any, tmp_path: Path) -> None:
    res = once(spawn, "!artifact plot.png\n!artifact ../../notes.md")
    env = res.envelope
    assert env is not None
    png, notes = env["artifacts"]
    assert png == {
        "kind": "file",
        "path": str(tmp_path / "workspace" / "plot.png"),
        "mediaType": "image/png",
        "tool": "reference",
        "source": "rendered",
    }
    data = Path(png["path"]).read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and data.endswith(b"IEND\xaeB`\x82")
    assert notes["path"] == str(tmp_path / "workspace" / "notes.md")  # never outside
    assert notes["mediaType"] == "text/markdown" and Path(notes["path"]).is_file()


def test_long_answers_have_paragraphs_and_balanced_code_blocks(spawn: Any) -> None:
    answer = once(spawn, "!long 6000").answer
    assert 6000 <= len(answer) < 7000
    assert answer.count("```") >= 2 and answer.count("```") % 2 == 0
    assert answer.count("\n\n") >= 5


def test_big_stdout_comes_before_the_envelope(spawn: Any) -> None:
    res = once(spawn, "!big-stdout 2")
    assert res.code == 0 and len(res.stdout) > 2 * 1024 * 1024
    assert res.envelope is not None and res.envelope["ok"] is True


def test_env_lists_names_not_values_and_the_identity(spawn: Any) -> None:
    res = once(spawn, "!env", env={"SOME_SETTING": "value-not-shown"}, umask=0o027)
    assert "SOME_SETTING" in res.answer and "JAZZ_HOME" in res.answer
    assert "value-not-shown" not in res.answer
    assert f"uid={os.getuid()} gid={os.getgid()}" in res.answer
    assert "umask=0027" in res.answer


def test_help_lists_every_directive_and_the_docstring_documents_them(spawn: Any) -> None:
    answer = once(spawn, "!help").answer
    doc = reference_runner.__doc__ or ""
    for name, _, _ in reference_runner.DIRECTIVES:
        assert f"`!{name}" in answer
        assert f"!{name} " in doc
    assert "unknown directive !nope" in once(spawn, "!nope").answer


# -- failures, crashes, signals ---------------------------------------------------------------


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


@pytest.mark.parametrize(("sig", "exit_code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signals_print_an_interrupted_envelope(spawn: Any, sig: int, exit_code: int) -> None:
    runner = spawn(prompt("!approve bash"))
    runner.wait_event("approval_required")
    runner.proc.send_signal(sig)
    res = runner.finish()
    assert res.code == exit_code and res.envelope is not None
    assert res.envelope["ok"] is False and res.envelope["code"] == "interrupted"
    assert res.envelope["signal"] == signal.Signals(sig).name


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


# -- bad input -------------------------------------------------------------------------------


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


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("--bogus",), "unrecognized arguments"),
        (("--approval-policy", "yolo"), "invalid choice"),
        (("--events", "tools,nonsense"), "unknown event categories"),
        (("--timeout", "soon"), "--timeout"),
    ],
)
def test_bad_flags_are_a_failure_envelope(spawn: Any, extra: tuple[str, ...], needle: str) -> None:
    res = spawn(prompt("x"), extra=extra).finish()
    assert res.code == 1 and res.envelope is not None and res.envelope["ok"] is False
    assert needle in res.envelope["error"]


def test_missing_home_and_missing_input_stdin(spawn: Any, tmp_path: Path) -> None:
    res = spawn(prompt("x"), home=None).finish()
    assert res.code == 1 and res.envelope is not None and "JAZZ_HOME" in res.envelope["error"]
    res = spawn(prompt("x"), home=None, extra=("--data-dir", str(tmp_path / "d"))).finish()
    assert res.code == 0 and (tmp_path / "d" / "history").is_dir()
    runner = Runner(tmp_path, [a for a in argv() if a != "--input-stdin"])
    try:
        runner.send(prompt("x"))
        res = runner.finish()
    finally:
        runner.kill()
    assert res.code == 1 and res.envelope is not None and "--input-stdin" in res.envelope["error"]


def test_attachments_are_reported(spawn: Any, tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("12345")
    res = spawn(prompt("see file", attachments=[str(tmp_path / "in.txt")])).finish()
    assert "Attachments: 1." in res.answer and "in.txt: 5 bytes" in res.answer
    bad = spawn(prompt("x", attachments="in.txt")).finish()
    assert bad.code == 1 and bad.envelope is not None and "attachments" in bad.envelope["error"]


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
