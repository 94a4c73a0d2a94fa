"""Which Jazz CLI a binary is (``bridge.runner.dialect``) and how a run speaks to it
(``CliRunner.argv``, ``prompt_mode``).

Helps are asked of real binaries in subprocesses: the fake of the released CLI 0.14.2
(``tests/fakes/fake_jazz.py``), the bundled reference runner (documented contract) and
scripts written here. Event lines are the recordings' (docs/runner-contract.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from bridge.runner.base import RunRequest
from bridge.runner.cli import CliRunner
from bridge.runner.dialect import (
    DOCUMENTED_ASSUMED,
    LONG_TIMEOUT_MS,
    MAX_ARGV_PROMPT_BYTES,
    RELEASED_CATEGORIES,
    CliProfile,
    Dialect,
    flat_tool_call,
    needs_person,
    parse_help,
    probe,
    profile_for,
    question_of,
)

TESTS = Path(__file__).resolve().parents[2]
FAKE_JAZZ = TESTS / "fakes" / "fake_jazz.py"
REFERENCE_RUNNER = TESTS.parent / "reference_runner"  # started as its directory
HELP_TIMEOUT_S = 60
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "JAZZ_NO_TUI": "1"}

# 07-approval-argv.txt
TOOL_CALL_07 = (
    '{"type":"tool_call","toolCall":{"id":"call_fake_1","type":"function","function":{"name":'
    '"execute_command","arguments":"{\\"command\\":\\"echo hello-from-tool > tool-out.txt; '
    'echo hello-from-tool\\",\\"description\\":\\"write a marker file and say hello\\"}"}},'
    '"sequence":0}'
)
ARGUMENTS_07 = (
    '{"command":"echo hello-from-tool > tool-out.txt; echo hello-from-tool",'
    '"description":"write a marker file and say hello"}'
)
APPROVAL_07 = (
    '{"type":"approval_required","toolCallId":"call_fake_1","toolName":"execute_command",'
    '"message":"Command: echo hello-from-tool","riskLevel":"high-risk",'
    '"autoApprovePolicy":"low-risk"}'
)
# 09-auto-approved.txt: the same tool under --approval-policy high-risk (approved by itself)
APPROVAL_09 = (
    '{"type":"approval_required","toolCallId":"call_fake_1","toolName":"execute_command",'
    '"message":"Command: echo hello-from-tool","riskLevel":"high-risk",'
    '"autoApprovePolicy":"high-risk"}'
)
# 12-askuser.txt: tool_call's arguments (JSON text), tool_execution_start's (an object)
ASK_ARGUMENTS_12 = (
    '{"question":"Which colour?","suggested_responses":[{"value":"red","label":"Red"},'
    '{"value":"blue","label":"Blue"}],"allow_multiple":false}'
)


def output(argv: list[str]) -> str:
    """What ``argv`` prints (stdout and stderr, as dialect.probe reads them)."""
    proc = subprocess.run(
        argv,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=HELP_TIMEOUT_S,
        env=ENV,
        check=False,
    )
    return (proc.stdout + b"\n" + proc.stderr).decode("utf-8", "replace")


def script(path: Path, body: str) -> list[str]:
    path.write_text(body)
    path.chmod(0o755)
    return [sys.executable, str(path)]


@pytest.fixture(scope="module")
def released() -> CliProfile:
    """The fake released CLI's profile, from its own help."""
    cmd = [sys.executable, str(FAKE_JAZZ)]
    return parse_help(
        output([*cmd, "run", "--help"]),
        output([*cmd, "--help"]),
        output([*cmd, "--version"]).strip().splitlines()[0],
    )


# -- parse_help, probe -----------------------------------------------------------------------


def test_the_released_cli_is_told_by_its_own_help(released: CliProfile) -> None:
    assert released.dialect is Dialect.RELEASED and released.released
    assert released.detected
    assert {"--stream", "--agent", "--json", "--conversation", "--approval-policy"} <= set(
        released.options
    )
    assert {"--events", "--timeout"} <= released.options
    # the documented contract's stdin flags are unknown options to it (exit 1, no envelope)
    assert not {"--interactive-stdin", "--input-stdin", "--park"} & released.options
    assert released.categories == {"tools", "reasoning", "text", "usage", "approval", "subagent"}
    assert "spend" not in released.categories and "all" not in released.categories
    assert released.has_daemon is False  # its --help lists no `daemon` command
    assert released.version == "0.14.2"
    assert "0.14.2" in released.describe() and "no `jazz daemon`" in released.describe()


def test_probe_asks_the_released_binary_the_same() -> None:
    profile = probe([sys.executable, str(FAKE_JAZZ)], ENV)
    assert profile.released and profile.detected
    assert profile.version == "0.14.2" and profile.has_daemon is False
    assert profile.categories is not None and "spend" not in profile.categories


def test_the_reference_runner_is_the_documented_contract_detected() -> None:
    profile = probe([sys.executable, str(REFERENCE_RUNNER)], ENV)
    assert profile.dialect is Dialect.DOCUMENTED and not profile.released
    assert profile.detected
    assert {"--interactive-stdin", "--input-stdin"} <= profile.options
    assert "assumed" not in profile.describe()


def test_a_runner_that_prints_no_help_is_assumed_documented(tmp_path: Path) -> None:
    silent = script(tmp_path / "silent.py", "import sys\nsys.exit(0)\n")
    assert output([*silent, "run", "--help"]).strip() == ""
    profile = probe(silent, ENV)
    assert profile == DOCUMENTED_ASSUMED
    assert profile.dialect is Dialect.DOCUMENTED and not profile.detected
    assert "assumed" in profile.describe()
    assert parse_help("") == DOCUMENTED_ASSUMED


def test_a_help_without_categories_gets_the_released_ones() -> None:
    profile = parse_help("Usage: jazz run [options] [prompt]\n  --agent <id>\n  --stream\n")
    assert profile.released and profile.categories == RELEASED_CATEGORIES
    assert profile.has_daemon is False  # no --help given: no daemon command seen


def test_a_released_help_that_names_a_daemon_command_has_one() -> None:
    run_help = "Usage: jazz run [options] [prompt]\n  --agent <id>\n  --stream\n"
    main_help = "Commands:\n  run [options] [prompt]  Run once\n  daemon  Serve HTTP\n"
    assert parse_help(run_help, main_help).has_daemon is True


# -- profile_for: the cache --------------------------------------------------------------------

COUNTING = """\
import sys
with open({count!r}, "a") as fh:
    fh.write(" ".join(sys.argv[1:]) + "\\n")
if sys.argv[1:] == ["run", "--help"]:
    print("Usage: jazz run [options] [prompt]")
    print("  --agent <agentId>  Agent")
    print("  --stream           Force streaming mode")
    print("  --events <c>       (comma-separated: tools,approval,usage,all)")
elif sys.argv[1:] == ["--help"]:
    print("Commands:\\n  run [options] [prompt]  Run\\n  agent  Manage agents")
elif sys.argv[1:] == ["--version"]:
    print("7.7.7")
"""


def counting_runner(tmp_path: Path) -> tuple[list[str], Path]:
    count = tmp_path / "asked.txt"
    return script(tmp_path / "jazz.py", COUNTING.format(count=str(count))), count


def asked(count: Path) -> int:
    return len(count.read_text().splitlines()) if count.exists() else 0


def test_a_profile_is_cached_and_not_asked_again_while_the_binary_is_unchanged(
    tmp_path: Path,
) -> None:
    command, count = counting_runner(tmp_path)
    cache = tmp_path / "state" / "runner-cli.json"
    cache.parent.mkdir()
    first = profile_for(command, ENV, cache)
    assert first.released and first.version == "7.7.7"
    assert first.categories == {"tools", "approval", "usage"}
    assert asked(count) == 3  # run --help, --help, --version
    assert cache.stat().st_mode & 0o777 == 0o640
    data = json.loads(cache.read_text())
    assert data["profile"]["dialect"] == "released"
    assert [str(Path(command[1]).resolve())] == [f[0] for f in data["key"]["files"][1:]]
    for _ in range(3):
        assert profile_for(command, ENV, cache) == first
    assert asked(count) == 3, "asked the binary again although it had not changed"


def test_a_changed_binary_is_asked_again(tmp_path: Path) -> None:
    command, count = counting_runner(tmp_path)
    cache = tmp_path / "runner-cli.json"
    profile_for(command, ENV, cache)
    assert asked(count) == 3
    runner = Path(command[1])
    st = runner.stat()
    # the same size, another mtime (a binary replaced in place by one as long)
    os.utime(runner, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert profile_for(command, ENV, cache).version == "7.7.7"
    assert asked(count) == 6
    assert profile_for(command, ENV, cache).version == "7.7.7"
    assert asked(count) == 6  # the new one is cached in turn
    # another size, the same mtime: now a documented runner
    mtime = runner.stat().st_mtime_ns
    runner.write_text(f"import sys\nopen({str(count)!r}, 'a').write('x\\n')\nprint('--json')\n")
    os.utime(runner, ns=(mtime, mtime))
    assert runner.stat().st_size != st.st_size
    profile = profile_for(command, ENV, cache)
    assert asked(count) == 7  # one question: not released, no --help nor --version
    assert profile == DOCUMENTED_ASSUMED


def test_write_false_reads_the_cache_and_never_writes_it(tmp_path: Path) -> None:
    command, count = counting_runner(tmp_path)
    cache = tmp_path / "runner-cli.json"
    assert profile_for(command, ENV, cache, write=False).released
    assert not cache.exists() and not list(tmp_path.glob(".runner-cli.json*"))
    assert asked(count) == 3
    profile_for(command, ENV, cache)  # serve asks (nothing was cached) and writes it
    assert asked(count) == 6
    before = cache.read_bytes()
    assert profile_for(command, ENV, cache, write=False).released
    assert asked(count) == 6  # read, not asked
    runner = Path(command[1])
    st = runner.stat()
    os.utime(runner, ns=(st.st_atime_ns, st.st_mtime_ns + 7_000_000_000))
    assert profile_for(command, ENV, cache, write=False).released
    assert asked(count) == 9  # stale: asked again, and still not written
    assert cache.read_bytes() == before


def test_no_cache_without_a_file_to_fingerprint(tmp_path: Path) -> None:
    cache = tmp_path / "runner-cli.json"
    assert profile_for(["/nonexistent/jazz"], ENV, cache) == DOCUMENTED_ASSUMED
    assert not cache.exists()


# -- the released CLI's events ----------------------------------------------------------------


def test_needs_person_as_the_recordings_show() -> None:
    assert needs_person(json.loads(APPROVAL_07), "low-risk") is True  # high under low: asked
    assert needs_person(json.loads(APPROVAL_09), "high-risk") is False  # approved by itself
    # its own policy field wins over the run's; without one, the run's is read
    assert needs_person(json.loads(APPROVAL_09), "low-risk") is False
    assert needs_person({"riskLevel": "high-risk"}, "high-risk") is False
    assert needs_person({"riskLevel": "high-risk"}, "low-risk") is True
    assert needs_person({"riskLevel": "read-only"}, "read-only") is False
    assert needs_person({"riskLevel": "low-risk", "autoApprovePolicy": "read-only"}, "") is True
    # unknown levels: a person decides
    assert needs_person({"riskLevel": "catastrophic", "autoApprovePolicy": "high-risk"}, "")
    assert needs_person({"riskLevel": "low-risk", "autoApprovePolicy": "yolo"}, "high-risk")
    assert needs_person({}, "high-risk") is True
    assert needs_person({"riskLevel": None, "autoApprovePolicy": "high-risk"}, "high-risk")


def test_flat_tool_call_of_recording_07() -> None:
    event = json.loads(TOOL_CALL_07)
    flat = flat_tool_call(event)
    assert flat["toolCallId"] == "call_fake_1"
    assert flat["toolName"] == "execute_command"
    assert flat["arguments"] == ARGUMENTS_07
    assert json.loads(flat["arguments"])["command"].startswith("echo hello-from-tool")
    assert flat["toolCall"] == event["toolCall"] and flat["sequence"] == 0
    assert "toolCallId" not in event  # the event itself is left as it was
    documented = {"type": "tool_call", "toolCallId": "t1", "toolName": "read"}
    assert flat_tool_call(documented) is documented


def test_question_of_recording_12() -> None:
    assert question_of(ASK_ARGUMENTS_12) == "Which colour?"
    assert question_of(json.loads(ASK_ARGUMENTS_12)) == "Which colour?"
    assert question_of('{"question": "  "}') is None
    assert question_of("{not json") is None
    assert question_of({"question": 3}) is None
    assert question_of(None) is None


# -- CliRunner: argv and where the prompt goes ------------------------------------------------


def request(prompt: str = "-rf hello", **extra: Any) -> RunRequest:
    """A request as argv() reads it (no home nor identity needed there)."""
    fields: dict[str, Any] = {
        "home": cast(Any, None),
        "identity": cast(Any, None),
        "conversation": "c-0123456789ab-1",
        "prompt": prompt,
        "agent": "default",
        "approval_policy": "low-risk",
        "timeout_s": 900.0,
        **extra,
    }
    return RunRequest(**fields)


def test_released_argv_has_its_flags_and_the_prompt_last(released: CliProfile) -> None:
    runner = CliRunner(["jazz"], profile=released, private_proc=True)
    req = request()
    assert "spend" in req.events  # the gateway's default asks for spend: not for this CLI
    argv = runner.argv(req, "argv")
    assert argv == [
        "jazz",
        "run",
        "--json",
        "--agent",
        "default",
        "--conversation",
        "c-0123456789ab-1",
        "--approval-policy",
        "low-risk",
        "--events",
        "tools,reasoning,text,approval,subagent,usage",
        "--timeout",
        str(LONG_TIMEOUT_MS),
        "--stream",
        "--",
        "-rf hello",
    ]
    assert LONG_TIMEOUT_MS == 2147483647
    assert argv.count("-rf hello") == 1
    stdin = runner.argv(req, "stdin")
    assert stdin == argv[:-2]  # no prompt, no "--"
    assert "-rf hello" not in stdin and "--" not in stdin
    for flag in ("--no-tui", "--interactive-stdin", "--input-stdin"):
        assert flag not in argv


def test_released_argv_passes_only_what_its_help_lists() -> None:
    narrow = CliProfile(
        Dialect.RELEASED,
        frozenset({"--agent", "--json", "--events"}),
        categories=frozenset({"tools", "approval"}),
        detected=True,
    )
    runner = CliRunner(["jazz"], profile=narrow, private_proc=True)
    # no --conversation, --approval-policy, --timeout nor --stream: its help lists none
    assert runner.argv(request("hi"), "argv") == [
        "jazz",
        "run",
        "--json",
        "--agent",
        "default",
        "--events",
        "tools,approval",
        "--",
        "hi",
    ]
    no_usage = CliProfile(
        Dialect.RELEASED,
        frozenset({"--agent", "--json", "--events", "--stream"}),
        categories=frozenset({"tools"}),
        detected=True,
    )
    argv = CliRunner(["jazz"], profile=no_usage).argv(request("hi"), "stdin")
    assert argv[argv.index("--events") + 1] == "tools"  # usage only when it takes usage
    assert argv[-1] == "--stream"


def test_documented_argv_is_unchanged() -> None:
    runner = CliRunner(["jazz"])
    argv = runner.argv(request(), runner.prompt_mode(request()))
    assert "--interactive-stdin" in argv and "--input-stdin" in argv
    assert argv[argv.index("--events") + 1] == "tools,reasoning,text,approval,subagent,spend"
    assert argv[argv.index("--timeout") + 1] == "900000"
    assert "-rf hello" not in argv and "--stream" not in argv


def test_prompt_mode(released: CliProfile) -> None:
    assert MAX_ARGV_PROMPT_BYTES == 128 * 1024 - 1
    hidden = CliRunner(["jazz"], profile=released, private_proc=True)
    assert hidden.prompt_mode(request("hello")) == "argv"
    assert hidden.prompt_mode(request("x" * MAX_ARGV_PROMPT_BYTES)) == "argv"
    assert hidden.prompt_mode(request("x" * (MAX_ARGV_PROMPT_BYTES + 1))) == "stdin"
    # bytes, not characters: 2 bytes each
    assert hidden.prompt_mode(request("é" * (MAX_ARGV_PROMPT_BYTES // 2))) == "argv"
    assert hidden.prompt_mode(request("é" * (MAX_ARGV_PROMPT_BYTES // 2 + 1))) == "stdin"
    assert hidden.prompt_mode(request("a\0b")) == "stdin"  # no NUL in an argv string
    # no namespace, nothing else hiding argv: the prompt is not put where others read it
    shown = CliRunner(["jazz"], profile=released, private_proc=False)
    assert shown.prompt_mode(request("hello")) == "stdin"
    # hidden by the host's /proc (hidepid, one account per conversation): argv, no namespace
    hidepid = CliRunner(["jazz"], profile=released, private_proc=False, argv_hidden=True)
    assert hidepid.prompt_mode(request("hello")) == "argv"
    documented = CliRunner(["jazz"], private_proc=True)
    for prompt in ("hello", "x" * (MAX_ARGV_PROMPT_BYTES + 1), "a\0b"):
        assert documented.prompt_mode(request(prompt)) == "json"
