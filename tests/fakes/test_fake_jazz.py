"""The released-CLI twin (``fake_jazz.py``) against the facts recorded from Jazz 0.14.2.

Each test runs the fake as a real subprocess, the way the gateway runs ``jazz``, and checks
one fact of the 0.14.2 recordings (docs/runner-contract.md; the recording's number is in
the test's name) or of the CLI's source. Every wait is bounded; nothing sleeps to synchronise.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
FAKE = HERE / "fake_jazz.py"
FAKE_RUNNER = HERE / "fake_runner.py"
WAIT_S = 15

UNKNOWN_OPTION_ARGV = [
    "run",
    "--json",
    "--no-tui",
    "--agent",
    "default",
    "--conversation",
    "web:x#1",
    "--approval-policy",
    "low-risk",
    "--events",
    "tools,reasoning,text,approval,subagent,spend",
    "--interactive-stdin",
    "--input-stdin",
    "--timeout",
    "900000",
]
SPEND_ENVELOPE = (
    '{"ok":false,"error":"Invalid --events category \\"spend\\". Expected: tools, reasoning,'
    ' text, usage, approval, subagent, all.","costUSD":0}\n'
)
WARNING_PREFIX = "No context window is pinned for this llamacpp agent, so Jazz is compacting"


class Lines:
    """Lines of one pipe, read on a thread, so a test can wait for one with a deadline."""

    def __init__(self, pipe: Any) -> None:
        self.q: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self.thread.start()

    def _read(self, pipe: Any) -> None:
        for raw in iter(pipe.readline, b""):
            self.q.put(raw.decode("utf-8"))
        self.q.put(None)

    def until(self, pred: Callable[[str], bool], timeout: float = WAIT_S) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no such line within {timeout}s; saw {self.seen!r}")
            try:
                line = self.q.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"pipe closed before the line; saw {self.seen!r}")
            self.seen.append(line)
            if pred(line):
                return line

    def event(self, kind: str, timeout: float = WAIT_S) -> dict:
        return json.loads(self.until(lambda line: event_type(line) == kind, timeout))

    def rest(self, timeout: float = WAIT_S) -> list[str]:
        """Every line up to the end of the pipe (the process has closed it)."""
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "pipe still open"
        while (line := self.q.get_nowait()) is not None:
            self.seen.append(line)
        return self.seen


def event_type(line: str) -> str | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value.get("type") if isinstance(value, dict) else None


def events(stderr: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines() if event_type(line)]


class Jazz:
    """A home with config.json and agents/default.json, a FAKE_DIR, and ways to run the fake."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        self.fake_dir = tmp / "fake"
        (self.home / "agents").mkdir(parents=True)
        self.fake_dir.mkdir()
        (self.home / "config.json").write_text(json.dumps({"llm": {}}))
        agent = {
            "id": "default",
            "name": "default",
            "config": {"llmProvider": "llamacpp", "llmModel": "fake-model"},
        }
        (self.home / "agents" / "default.json").write_text(json.dumps(agent))
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp),
            "JAZZ_HOME": str(self.home),
            "FAKE_DIR": str(self.fake_dir),
        }

    def run(
        self, *args: str, stdin: bytes | None = b"", env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, str(FAKE), *args],
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            env={**self.env, **(env or {})},
            cwd=self.tmp,
            timeout=WAIT_S,
        )
        return subprocess.CompletedProcess(
            done.args, done.returncode, done.stdout.decode("utf-8"), done.stderr.decode("utf-8")
        )

    def start(
        self, *args: str, stdin: Any = subprocess.PIPE
    ) -> tuple[subprocess.Popen, Lines, Lines]:
        proc = subprocess.Popen(
            [sys.executable, str(FAKE), *args],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            cwd=self.tmp,
        )
        return proc, Lines(proc.stdout), Lines(proc.stderr)

    def logs(self) -> list[dict]:
        records = []
        for path in sorted(self.fake_dir.glob("run-*.log")):
            records += [json.loads(line) for line in path.read_text().splitlines()]
        return sorted(records, key=lambda r: r["t"])

    def wait_log(self, event: str, timeout: float = WAIT_S) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [r for r in self.logs() if r["event"] == event]
            if found:
                return found[-1]
            time.sleep(0.01)
        raise AssertionError(f"no {event!r} record within {timeout}s")


@pytest.fixture
def jazz(tmp_path: Path) -> Jazz:
    return Jazz(tmp_path)


def envelope(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert lines, f"no envelope in {stdout!r}"
    return json.loads(lines[-1])


def run_argv(*extra: str) -> list[str]:
    return ["run", "--json", "--agent", "default", *extra]


# -- argv, as commander parses it ----------------------------------------------------------------


def test_02_unknown_option_exits_1_with_no_stdout(jazz: Jazz) -> None:
    done = jazz.run(*UNKNOWN_OPTION_ARGV, stdin=b'{"prompt":"hi"}\n')
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "error: unknown option '--interactive-stdin'\n"
    assert jazz.logs() == []  # it never got as far as a run


def test_03_spend_category_is_a_failure_envelope(jazz: Jazz) -> None:
    done = jazz.run(*run_argv("--events", "tools,spend"), stdin=b"hi")
    assert (done.returncode, done.stdout, done.stderr) == (1, SPEND_ENVELOPE, "")


def test_required_agent_option(jazz: Jazz) -> None:
    done = jazz.run("run", "--json", "hi")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "error: required option '--agent <agentId>' not specified\n"


def test_run_help_lists_what_the_binary_accepts(jazz: Jazz) -> None:
    done = jazz.run("run", "--help")
    assert done.returncode == 0
    assert done.stdout.startswith("Usage: jazz run [options] [prompt]\n\nRun an agent once")
    assert "\nOptions:\n" in done.stdout
    for flag in ("--agent <agentId>", "--stream", "--no-stream", "--events <categories>"):
        assert f"\n  {flag} " in done.stdout
    assert "  -h, --help                    display help for command\n" in done.stdout
    assert "--interactive-stdin" not in done.stdout and "--input-stdin" not in done.stdout


def test_help_version_and_no_daemon(jazz: Jazz) -> None:
    done = jazz.run("--help")
    assert done.returncode == 0 and done.stdout.startswith("Usage: jazz [options] [command]")
    commands = done.stdout.split("\nCommands:\n", 1)[1]
    for name in ("run [options] [prompt]", "agent", "persona", "config", "mcp", "workflow"):
        assert f"\n  {name} " in "\n" + commands
    assert "daemon" not in done.stdout
    done = jazz.run("daemon", "--port", "4747")
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        "error: unknown command 'daemon'\n",
    )
    done = jazz.run("--version")
    assert (done.returncode, done.stdout) == (0, "0.14.2\n")


def test_prompt_after_double_dash_is_never_an_option(jazz: Jazz) -> None:
    done = jazz.run(*run_argv("--no-tui", "--", "--interactive-stdin"), stdin=None)
    assert done.returncode == 0
    assert envelope(done.stdout)["answer"] == "fake answer to: --interactive-stdin"


def test_one_positional_prompt_only(jazz: Jazz) -> None:
    done = jazz.run(*run_argv("a", "b"))
    assert (done.returncode, done.stdout) == (1, "")
    assert "too many arguments for 'run'" in done.stderr


# -- the prompt ---------------------------------------------------------------------------------


def test_01_stdin_prompt_and_the_plain_warning(jazz: Jazz) -> None:
    done = jazz.run(*run_argv(), stdin=b"hi there")
    assert done.returncode == 0
    env = envelope(done.stdout)
    assert env["ok"] is True and env["answer"] == "fake answer to: hi there"
    assert set(env) == {"ok", "answer", "costUSD", "tokenUsage", "toolCalls"}
    assert set(env["tokenUsage"]) == {"promptTokens", "completionTokens", "totalTokens"}
    assert done.stderr.startswith(f"⚠ default: {WARNING_PREFIX}")  # no --events: plain text
    assert done.stderr.rstrip().endswith("Pin one with `jazz agent edit` → Context Window.")


def test_04_json_line_on_stdin_is_just_text(jazz: Jazz) -> None:
    line = b'{"prompt": "hello bridge"}\n'
    argv = run_argv("--conversation", "web:x#1", "--events", "tools,approval", "--stream")
    done = jazz.run(*argv, stdin=line)
    assert done.returncode == 0
    assert envelope(done.stdout)["answer"] == 'fake answer to: {"prompt": "hello bridge"}\n'
    first = json.loads(done.stderr.splitlines()[0])
    assert first["type"] == "warning" and first["agentName"] == "default"
    assert first["message"].startswith(WARNING_PREFIX) and first["message"].endswith("trunca…")


def test_no_prompt_is_a_failure_envelope(jazz: Jazz) -> None:
    done = jazz.run(*run_argv(), stdin=b"  \n")
    assert done.returncode == 1
    assert done.stdout == (
        '{"ok":false,"error":"No prompt provided. Pass it as an argument or pipe it via'
        ' stdin.","costUSD":0}\n'
    )


def test_06_stdin_held_open_waits_for_its_end(jazz: Jazz) -> None:
    proc, out, _ = jazz.start(*run_argv("--events", "tools,approval"))
    proc.stdin.write(b'{"prompt": "held open"}\n')
    proc.stdin.flush()
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.5)  # bounded: it must still be waiting for the end of stdin
    proc.stdin.close()
    assert proc.wait(timeout=WAIT_S) == 0
    assert envelope("".join(out.rest()))["answer"] == 'fake answer to: {"prompt": "held open"}\n'


# -- the home -----------------------------------------------------------------------------------


def test_no_agent_file(jazz: Jazz) -> None:
    (jazz.home / "agents" / "default.json").unlink()
    done = jazz.run(*run_argv("hi"))
    assert (done.returncode, done.stderr) == (1, "")
    assert done.stdout == '{"ok":false,"error":"No agent found with ID: default","costUSD":0}\n'


def test_agent_found_by_name(jazz: Jazz) -> None:
    agent = json.loads((jazz.home / "agents" / "default.json").read_text())
    (jazz.home / "agents" / "default.json").unlink()
    (jazz.home / "agents" / "a1b2.json").write_text(json.dumps({**agent, "id": "a1b2"}))
    done = jazz.run(*run_argv("hi"))
    assert done.returncode == 0 and envelope(done.stdout)["answer"] == "fake answer to: hi"


def test_05_continuation_counts_turns_and_streams_text_and_usage(jazz: Jazz) -> None:
    argv = run_argv("--conversation", "web:x#1", "--events", "tools,text,usage,approval")
    first = jazz.run(*argv, stdin=b"first message")
    second = jazz.run(*argv, "--stream", stdin=b"second message")
    assert (first.returncode, second.returncode) == (0, 0)
    assert envelope(second.stdout)["answer"] == "fake answer to: second message"
    starts = [r for r in jazz.logs() if r["event"] == "start"]
    assert [r["turns"] for r in starts] == [1, 2]
    assert all(r["home"] == str(jazz.home) for r in starts)
    # without --stream (stdout is a pipe) no text/usage event comes; with it they do
    assert {e["type"] for e in events(first.stderr)} & {"text_chunk", "usage_update"} == set()
    kinds = [e["type"] for e in events(second.stderr)]
    assert {"stream_start", "text_start", "text_chunk", "usage_update", "complete"} <= set(kinds)
    chunks = [e for e in events(second.stderr) if e["type"] == "text_chunk"]
    assert chunks[-1]["accumulated"] == "fake answer to: second message"
    history = json.loads((jazz.home / "history" / "default.json").read_text())
    (record,) = history["conversations"]
    assert record["conversationId"] == "web:x#1" and record["messageCount"] == 4


def test_default_answer_reads_with_the_nested_tool_call(jazz: Jazz) -> None:
    done = jazz.run(*run_argv("--events", "tools", "--stream", "hello"))
    kinds = [e["type"] for e in events(done.stderr)]
    assert kinds == [
        "warning",
        "tool_call",
        "tools_detected",
        "tool_execution_start",
        "tool_execution_complete",
    ]
    call = events(done.stderr)[1]["toolCall"]
    assert call["function"]["name"] == "read" and json.loads(call["function"]["arguments"])
    assert envelope(done.stdout)["toolCalls"][0]["name"] == "read"


# -- approvals ----------------------------------------------------------------------------------


def test_07_approval_answered_on_stdin_then_waits_for_stdin_to_close(jazz: Jazz) -> None:
    argv = run_argv("--conversation", "tool#1", "--approval-policy", "low-risk")
    proc, out, err = jazz.start(*argv, "--events", "tools,approval", "--stream", "please approve")
    call = err.event("tool_call")["toolCall"]
    assert call["id"] == "call_fake_1" and call["type"] == "function"
    assert call["function"]["name"] == "execute_command"
    assert json.loads(call["function"]["arguments"])["command"].startswith("echo hello-from-tool")
    ask = err.event("approval_required")
    assert set(ask) == {
        "type",
        "toolCallId",
        "toolName",
        "message",
        "riskLevel",
        "autoApprovePolicy",
    }
    assert (ask["toolName"], ask["riskLevel"], ask["autoApprovePolicy"]) == (
        "execute_command",
        "high-risk",
        "low-risk",
    )
    assert ask["message"].startswith("Command: echo hello-from-tool")
    decision = {"type": "approval_decision", "toolCallId": ask["toolCallId"], "approved": True}
    proc.stdin.write(b"not json\n" + json.dumps(decision).encode() + b"\n")
    proc.stdin.flush()
    resolved = err.event("approval_resolved")
    assert (resolved["approved"], resolved["auto"]) == (True, False)
    env = json.loads(out.until(lambda line: line.startswith("{")))
    assert env["ok"] is True and env["answer"] == "the tool was approved"
    assert env["toolCalls"] == [
        {"id": "call_fake_1", "name": "execute_command", "arguments": call["function"]["arguments"]}
    ]
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.5)  # bounded: the envelope is out but stdin is still open
    proc.stdin.close()
    assert proc.wait(timeout=WAIT_S) == 0
    kinds = [event_type(line) for line in err.rest()]
    assert kinds[-2:] == ["tool_execution_start", "tool_execution_complete"]


def test_07_rejected_on_stdin(jazz: Jazz) -> None:
    proc, out, err = jazz.start(*run_argv("--events", "approval", "approve"))
    ask = err.event("approval_required")
    assert "autoApprovePolicy" not in ask  # no --approval-policy
    decision = {"type": "approval_decision", "toolCallId": ask["toolCallId"], "approved": False}
    proc.stdin.write(json.dumps(decision).encode() + b"\n")
    proc.stdin.close()
    assert proc.wait(timeout=WAIT_S) == 0
    assert envelope("".join(out.rest()))["answer"] == "the tool was rejected"


def test_08_approval_with_stdin_closed_runs_into_its_timeout(jazz: Jazz) -> None:
    argv = run_argv("--approval-policy", "low-risk", "--events", "tools,approval", "--stream")
    started = time.monotonic()
    done = jazz.run(*argv, "--timeout", "1000", stdin=b"C approve")
    assert time.monotonic() - started >= 1.0
    assert done.returncode == 1
    assert done.stdout == '{"ok":false,"error":"Run exceeded the 1000ms timeout.","costUSD":0}\n'
    assert [e["type"] for e in events(done.stderr)][-1] == "approval_required"
    # a prompt on argv with stdin at its end: nobody can answer either
    done = jazz.run(*argv, "--timeout", "300", "approve", stdin=None)
    assert envelope(done.stdout)["error"] == "Run exceeded the 300ms timeout."


def test_09_auto_approved_needs_no_person(jazz: Jazz) -> None:
    argv = run_argv("--approval-policy", "high-risk", "--events", "tools,approval", "--stream")
    proc, out, err = jazz.start(*argv, "auto approve")
    assert proc.wait(timeout=WAIT_S) == 0  # stdin is still open: no reader was attached
    proc.stdin.close()
    resolved = [json.loads(line) for line in err.rest() if event_type(line)]
    by_type = {e["type"]: e for e in resolved}
    assert by_type["approval_required"]["autoApprovePolicy"] == "high-risk"
    assert (by_type["approval_resolved"]["approved"], by_type["approval_resolved"]["auto"]) == (
        True,
        True,
    )
    done = by_type["tool_execution_complete"]
    assert done["success"] is True and done["result"].startswith('{"command":"echo hello-from')
    assert envelope("".join(out.rest()))["answer"] == "the tool was approved"


def test_headless_run_declines_at_once(jazz: Jazz) -> None:
    done = jazz.run(*run_argv("approve"), stdin=None)  # no --events: nobody could answer
    assert done.returncode == 0
    assert envelope(done.stdout)["answer"] == "the tool was rejected"
    assert events(done.stderr) == []


# -- failures, signals, tools -------------------------------------------------------------------


def test_10_provider_500_is_a_plain_stack_trace(jazz: Jazz) -> None:
    done = jazz.run(*run_argv("--events", "tools,approval", "--stream", "E fail500"))
    assert done.returncode == 1
    assert done.stdout == (
        '{"ok":false,"error":"Server error (500): fake upstream exploded","costUSD":0}\n'
    )
    lines = done.stderr.splitlines()
    assert "AI_APICallError: fake upstream exploded" in lines
    assert " statusCode: 500," in lines
    assert [e["type"] for e in events(done.stderr)] == ["warning"]  # no error event


def test_11_sigterm_prints_on_stdout_and_exits_0(jazz: Jazz) -> None:
    proc, out, _ = jazz.start(*run_argv("--events", "tools,approval", "F hang"), stdin=None)
    jazz.wait_log("start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=WAIT_S) == 0
    assert "".join(out.rest()) == "\nReceived SIGTERM. Shutting down...\n"
    assert jazz.logs()[-1]["event"] == "end"


def test_12_ask_user_gets_an_empty_answer(jazz: Jazz) -> None:
    done = jazz.run(*run_argv("--events", "tools,approval", "--stream", "ASK askuser colour"))
    assert done.returncode == 0
    got = events(done.stderr)
    assert [e["type"] for e in got] == [
        "warning",
        "tool_call",
        "tools_detected",
        "tool_execution_start",
        "tool_execution_complete",
    ]
    assert got[1]["toolCall"]["function"]["name"] == "ask_user_question"
    assert got[2]["toolsRequiringApproval"] == []
    assert got[3]["longRunning"] is True
    assert (got[4]["result"], got[4]["success"]) == ('"User responded: "', True)
    assert envelope(done.stdout)["toolCalls"][0]["name"] == "ask_user_question"


def test_every_event_string_is_cut_to_200(jazz: Jazz) -> None:
    prompt = "a" + "\U0001f600" * 150  # JS counts UTF-16 units: the cut splits a pair
    done = jazz.run(*run_argv("--events", "text,usage", "--stream", prompt))
    complete = [line for line in done.stderr.splitlines() if event_type(line) == "complete"][-1]
    content = json.loads(complete)["response"]["content"]
    assert len(content.encode("utf-16-le", "surrogatepass")) // 2 == 201
    assert content.endswith("\ud83d…") and '\\ud83d…"' in complete
    assert envelope(done.stdout)["answer"] == f"fake answer to: {prompt}"  # stdout is whole


def test_web_app_and_costly(jazz: Jazz) -> None:
    done = jazz.run(*run_argv("webapp costly"))
    env = envelope(done.stdout)
    assert env["costUSD"] == 0.25
    app = env["webApp"]
    assert (app["mode"], set(app)) == ("static", {"id", "mode", "title", "htmlPath", "imagePath"})
    for key in ("htmlPath", "imagePath"):
        path = Path(app[key])
        assert path.parent == jazz.home / "webapps" and path.is_file()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    outside = envelope(jazz.run(*run_argv("artifact-outside")).stdout)["webApp"]
    assert outside["imagePath"] == "/etc/passwd"


@pytest.mark.parametrize(
    ("word", "code", "stdout"),
    [("crash", 1, ""), ("garbage", 1, "this is not json at all\n"), ("noenvelope", 0, "")],
)
def test_words_without_an_envelope(jazz: Jazz, word: str, code: int, stdout: str) -> None:
    done = jazz.run(*run_argv(word))
    assert (done.returncode, done.stdout) == (code, stdout)


def test_files_are_private_or_group_readable_in_a_setgid_home(jazz: Jazz) -> None:
    jazz.run(*run_argv("--conversation", "c1", "hi"))
    history = jazz.home / "history"
    assert stat.S_IMODE(history.stat().st_mode) == 0o700
    assert stat.S_IMODE((history / "default.json").stat().st_mode) == 0o600
    shared = Jazz(jazz.tmp / "shared")
    shared.home.chmod(0o2770)
    shared.run(*run_argv("--conversation", "c1", "hi"))
    history = shared.home / "history"
    assert stat.S_IMODE(history.stat().st_mode) & 0o777 == 0o750
    assert stat.S_IMODE((history / "default.json").stat().st_mode) == 0o640


def test_startup_delay_is_configurable(jazz: Jazz) -> None:
    started = time.monotonic()
    done = jazz.run("--version", env={"FAKE_JAZZ_STARTUP_S": "0.3"})
    assert done.stdout == "0.14.2\n" and time.monotonic() - started >= 0.3


def test_fake_runner_logs_the_home_too(jazz: Jazz) -> None:
    done = subprocess.run(
        [sys.executable, str(FAKE_RUNNER), "run", "--conversation", "c1"],
        input=b'{"prompt": "hi"}\n',
        capture_output=True,
        env=jazz.env,
        timeout=WAIT_S,
    )
    assert done.returncode == 0
    (start,) = [r for r in jazz.logs() if r["event"] == "start"]
    assert start["home"] == str(jazz.home)
