"""The reference runner: speaks the ``jazz run --json`` contract, and is not an AI.

The real ``jazz`` is a Bun program that cannot be installed on every machine, so the
package ships this stand-in: ``jazz-bridge serve`` works on a fresh machine, and tests can
drive every path of the contract (events, approvals, questions, secrets, artifacts,
failures, timeouts, signals). It is stdlib-only (it is copied next to the homes and run by
conversation accounts) and says plainly in every answer that it is not an AI.

Directives in the prompt (one per line or inline):
  !help            list the directives
  !tools N         emit N tool calls (events and envelope toolCalls)
  !subagent        a sub-agent start/complete pair
  !delay S         work S seconds (float), emitting progress events
  !approve TOOL    ask for an approval and wait for the decision (!approve2: two at once)
  !ask QUESTION    ask a question with suggestions and wait for the answer
  !secret NAME     ask for a secret (never echoed: only its length is reported)
  !artifact NAME   write workspace/NAME (a PNG if NAME ends in .png) and list it
  !cost X          report a known cost of X US dollars
  !long N          an answer of about N characters with paragraphs and a code block
  !env             list the environment's variable names, uid, gid, groups and umask
  !fail [MSG]      a failure envelope (exit 1)     !empty   an empty answer (exit 1)
  !crash           exit 3 without an envelope      !garbage garbage on stdout, no envelope
  !big-stdout MB   MB megabytes of junk on stdout before the envelope
  !spawn S         leave a child and a setsid grandchild running S seconds
  !ignore-term     ignore SIGTERM (the gateway must escalate to SIGKILL)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import re
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from typing import Any, NoReturn

NOT_AN_AI = "This is the jazz-bridge reference runner, not an AI."
EVENT_CATEGORIES = {
    "tools": {"tools_detected", "tool_call", "tool_execution_start", "tool_execution_complete"},
    "reasoning": {"thinking_start", "thinking_chunk", "thinking_complete"},
    "text": {"text_start", "text_chunk"},
    "usage": {"stream_start", "usage_update", "complete"},
    "approval": {
        "command_risk_classifying",
        "command_risk_classified",
        "approval_required",
        "approval_resolved",
    },
    "subagent": {"subagent_start", "subagent_complete", "subagent_result"},
    "spend": {"run_spend"},
}
ALWAYS = {"error", "user_input_required", "user_secret_required", "log"}
MAX_SELF_HANG_S = 300.0


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.events = set(filter(None, (args.events or "").split(",")))
        self.events.add("usage")
        self.answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self.eof = threading.Event()
        self.timeout_s = args.timeout / 1000 if args.timeout else None
        self.active_s = 0.0
        self.active_since = time.monotonic()
        self.tool_calls: list[dict[str, Any]] = []
        self.artifacts: list[dict[str, Any]] = []
        self.cost: float | None = None
        self.ignore_term = False

    # -- output -------------------------------------------------------------------------------
    def emit(self, type_: str, **data: Any) -> None:
        allowed = type_ in ALWAYS or any(
            type_ in EVENT_CATEGORIES[c] for c in self.events if c in EVENT_CATEGORIES
        )
        if allowed:
            sys.stderr.write(json.dumps({"type": type_, **data}) + "\n")
            sys.stderr.flush()

    def envelope(
        self, ok: bool, answer: str = "", code: str = "failed", error: str = "", **extra: Any
    ) -> None:
        words = len(self.args.prompt_text.split())
        completion = len(answer.split())
        env: dict[str, Any] = {
            "ok": ok,
            "costUSD": self.cost or 0.0,
            "costKnown": self.cost is not None,
            "tokenUsage": {
                "promptTokens": words,
                "completionTokens": completion,
                "totalTokens": words + completion,
            },
            "toolCalls": self.tool_calls,
            "artifacts": self.artifacts,
        }
        if ok:
            env.update(answer=answer, finishReason="stop")
        else:
            env.update(code=code, error=error)
        env.update(extra)
        sys.stdout.write(json.dumps(env) + "\n")
        sys.stdout.flush()

    # -- time ---------------------------------------------------------------------------------
    def pause(self) -> None:
        self.active_s += time.monotonic() - self.active_since

    def resume(self) -> None:
        self.active_since = time.monotonic()

    def check_timeout(self) -> None:
        if self.timeout_s is None:
            return
        if self.active_s + (time.monotonic() - self.active_since) > self.timeout_s:
            self.envelope(False, code="failed", error=f"timed out after {self.timeout_s:g}s")
            sys.exit(1)

    def work(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end:
            self.check_timeout()
            n += 1
            self.emit("text_chunk", text=f"working ({n})… ")
            self.emit("usage_update", totalTokens=n * 10)
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))

    def wait_for(self, kind: str, ident: str, key: str) -> dict[str, Any] | None:
        """Wait (timeout paused) for the answer frame of one prompt; None on EOF."""
        self.pause()
        try:
            while True:
                try:
                    frame = self.answers.get(timeout=0.1)
                except queue.Empty:
                    if self.eof.is_set() and self.answers.empty():
                        return None
                    continue
                if frame.get("type") == kind and frame.get(key) == ident:
                    return frame
                self.answers.put(frame)  # someone else's answer: keep it
                time.sleep(0.01)
        finally:
            self.resume()


def read_stdin(run: Run) -> None:
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            frame = json.loads(line)
        except ValueError:
            continue
        if isinstance(frame, dict):
            run.answers.put(frame)
    run.eof.set()


def safe_name(key: str) -> str:
    prefix = re.sub(r"[^a-z0-9._-]+", "-", key.lower()).strip("-.")[:40] or "conversation"
    return f"{prefix}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def modes_for(directory: str) -> tuple[int, int]:
    """Jazz's rule: 0600/0700, but keep group read in a setgid directory (0640/0750)."""
    try:
        setgid = bool(os.stat(directory).st_mode & stat.S_ISGID)
    except OSError:
        setgid = False
    return (0o640, 0o750) if setgid else (0o600, 0o700)


def ensure_dir(path: str) -> None:
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    ensure_dir(parent)
    _, dir_mode = modes_for(parent)
    os.mkdir(path, dir_mode)
    os.chmod(path, dir_mode | (os.stat(path).st_mode & stat.S_ISGID))


def atomic_write(path: str, data: bytes) -> None:
    directory = os.path.dirname(path)
    ensure_dir(directory)
    file_mode, _ = modes_for(directory)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        os.fchmod(fd, file_mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def tiny_png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    width = height = 8
    raw = b"".join(b"\x00" + b"\x20\x60\xc0" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def directives(prompt: str) -> list[tuple[str, str]]:
    """``!name rest-of-line`` directives, in order."""
    found = []
    for match in re.finditer(r"!([a-z][a-z0-9-]*)[ \t]*([^\n!]*)", prompt):
        found.append((match.group(1), match.group(2).strip()))
    return found


def fail(message: str, code: str = "failed") -> NoReturn:
    sys.stdout.write(
        json.dumps({"ok": False, "code": code, "error": message, "costUSD": 0, "costKnown": False})
        + "\n"
    )
    sys.stdout.flush()
    sys.exit(1)


def parse_args(argv: list[str]) -> argparse.Namespace:
    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            fail(f"bad arguments: {message}")

    p = Parser(prog="jazz-reference-runner")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    for flag in (
        "--json",
        "--no-tui",
        "--interactive-stdin",
        "--input-stdin",
        "--ephemeral",
        "--park",
    ):
        r.add_argument(flag, action="store_true")
    for flag in (
        "--agent",
        "--conversation",
        "--approval-policy",
        "--events",
        "--auto-approve-tools",
        "--timezone",
        "--max-iterations",
        "--max-cost-usd",
        "--max-tokens",
        "--max-duration-ms",
        "--data-dir",
    ):
        r.add_argument(flag)
    r.add_argument("--timeout", type=int)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not args.input_stdin:
        fail("this runner needs --input-stdin (the prompt never goes on the command line)")
    home = args.data_dir or os.environ.get("JAZZ_HOME")
    if not home:
        fail("JAZZ_HOME (or --data-dir) is not set")
    first = sys.stdin.readline()
    try:
        frame = json.loads(first)
        prompt = frame["prompt"]
        if not isinstance(prompt, str):
            raise TypeError("prompt is not a string")
    except (ValueError, KeyError, TypeError) as exc:
        fail(f'the first stdin line must be {{"prompt": "..."}}: {exc}')
    args.prompt_text = prompt
    run = Run(args)

    def on_signal(signum: int, _frame: Any) -> None:
        if run.ignore_term and signum == signal.SIGTERM:
            return
        name = signal.Signals(signum).name
        run.envelope(False, code="interrupted", error=f"interrupted by {name}", signal=name)
        os._exit(130 if signum == signal.SIGINT else 143)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threading.Thread(target=read_stdin, args=(run,), daemon=True).start()

    conversation = args.conversation or "default"
    history_path = os.path.join(home, "history", safe_name(conversation) + ".json")
    history: list[dict[str, str]] = []
    if not args.ephemeral:
        try:
            with open(history_path, encoding="utf-8") as fh:
                loaded = json.load(fh)
            if isinstance(loaded, list):
                history = loaded
        except (OSError, ValueError):
            history = []
    elif isinstance(frame.get("history"), list):
        history = frame["history"]

    run.emit("stream_start", model="reference")
    run.emit("thinking_start")
    run.emit("thinking_complete")
    sys.stderr.write("reference runner: log noise that is not an event\n")
    notes: list[str] = []
    answer_override: str | None = None

    for name, rest in directives(prompt):
        run.check_timeout()
        if name == "help":
            answer_override = __doc__ or ""
        elif name == "tools":
            count = int(rest) if rest.isdigit() else 1
            for i in range(count):
                call_id = f"call-{i + 1}"
                tool = ["read", "bash", "search"][i % 3]
                arguments = json.dumps({"n": i + 1})
                run.emit("tool_call", toolCallId=call_id, toolName=tool, arguments=arguments)
                run.emit("tool_execution_start", toolCallId=call_id, toolName=tool)
                run.emit("tool_execution_complete", toolCallId=call_id, toolName=tool, result="ok")
                run.tool_calls.append({"id": call_id, "name": tool, "arguments": arguments})
            notes.append(f"ran {count} pretend tool call(s)")
        elif name == "subagent":
            run.emit("subagent_start", name="helper")
            run.emit("subagent_complete", name="helper")
            notes.append("ran a pretend sub-agent")
        elif name == "delay":
            try:
                run.work(float(rest or "1"))
            except ValueError:
                run.work(1.0)
        elif name in ("approve", "approve2"):
            tools = [rest or "bash"] if name == "approve" else [rest or "bash", "write"]
            ids = [f"approval-{i + 1}-{os.getpid()}" for i in range(len(tools))]
            if args.park:
                run.envelope(
                    False,
                    code="failed",
                    error="parked: waiting for an approval",
                    parked=True,
                    pending=[{"toolCallId": i} for i in ids],
                )
                return 2
            for ident, tool in zip(ids, tools, strict=True):
                run.emit(
                    "approval_required",
                    toolCallId=ident,
                    toolName=tool,
                    message=f"The reference runner wants to run {tool}.",
                    preview=f"{tool} --pretend",
                )
            for ident, tool in zip(ids, tools, strict=True):
                got = run.wait_for("approval_decision", ident, "toolCallId")
                approved = bool(got and got.get("approved"))
                run.emit("approval_resolved", toolCallId=ident, approved=approved)
                notes.append(f"{tool} was {'approved' if approved else 'declined'}")
        elif name == "ask":
            ident = f"question-{os.getpid()}"
            run.emit(
                "user_input_required",
                requestId=ident,
                question=rest or "Which one?",
                suggestions=[{"value": "red", "label": "Red"}, {"value": "blue", "label": "Blue"}],
                allowCustom=True,
            )
            got = run.wait_for("user_input_response", ident, "requestId")
            response = str(got.get("response", "")) if got else ""
            notes.append(f"you answered: {response}" if response else "the question was declined")
        elif name == "secret":
            ident = f"secret-{os.getpid()}"
            run.emit(
                "user_secret_required",
                requestId=ident,
                name=rest or "a token",
                message=f"The reference runner asks for {rest or 'a token'}.",
            )
            got = run.wait_for("user_secret_response", ident, "requestId")
            if got and isinstance(got.get("value"), str):
                notes.append(f"got a secret of {len(got['value'])} characters (not shown)")
            elif got and got.get("unavailable"):
                notes.append(f"no secret is available here ({got['unavailable']})")
            else:
                notes.append("the secret was declined")
        elif name == "artifact":
            fname = re.sub(r"[^A-Za-z0-9._-]", "_", rest or "artifact.txt")
            path = os.path.join(home, "workspace", fname)
            png = fname.lower().endswith(".png")
            atomic_write(path, tiny_png() if png else f"{NOT_AN_AI}\n".encode())
            run.artifacts.append(
                {
                    "kind": "file",
                    "path": path,
                    "mediaType": "image/png" if png else "text/plain",
                    "tool": "reference",
                    "source": "rendered",
                }
            )
            notes.append(f"wrote {fname}")
        elif name == "cost":
            try:
                run.cost = float(rest)
            except ValueError:
                run.cost = 0.01
        elif name == "long":
            size = int(rest) if rest.isdigit() else 5000
            paragraphs: list[str] = []
            while sum(len(p) for p in paragraphs) < size:
                i = len(paragraphs)
                paragraphs.append(f"Paragraph {i}: " + "lorem ipsum " * 30)
                if i % 4 == 2:
                    body = "\n".join(f"line_{i}_{j} = {j}" for j in range(25))
                    paragraphs.append(f"```python\n{body}\n```")
            answer_override = "\n\n".join(paragraphs)
        elif name == "env":
            mask = os.umask(0)
            os.umask(mask)
            notes.append("environment: " + ", ".join(sorted(os.environ)))
            notes.append(
                f"uid={os.getuid()} gid={os.getgid()} groups={os.getgroups()} umask={mask:04o}"
            )
        elif name == "fail":
            run.envelope(
                False, code="failed", error=rest or "the reference runner was told to fail"
            )
            return 1
        elif name == "empty":
            run.envelope(False, code="empty_response", error="the answer was empty")
            return 1
        elif name == "crash":
            sys.stderr.write("Traceback (most recent call last):\n  reference crash\n")
            sys.stderr.flush()
            return 3
        elif name == "garbage":
            sys.stdout.write("%%% this is not an envelope %%%\n")
            sys.stdout.flush()
            return 1
        elif name == "big-stdout":
            megabytes = float(rest or "1")
            chunk = ("x" * 1023 + "\n").encode()
            for _ in range(int(megabytes * 1024)):
                sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
        elif name == "spawn":
            seconds = rest or "60"
            child = subprocess.Popen(["sleep", seconds])
            grand = subprocess.Popen(["setsid", "sleep", seconds])
            run.emit("log", pids=[child.pid, grand.pid])
        elif name == "ignore-term":
            run.ignore_term = True
            end = time.monotonic() + MAX_SELF_HANG_S
            while time.monotonic() < end:
                time.sleep(0.1)

    turns = len([h for h in history if h.get("role") == "user"])
    if answer_override is not None:
        answer = answer_override
    else:
        quoted = "\n".join("> " + line for line in prompt.splitlines()) or "> (empty)"
        lines = [
            f"**{NOT_AN_AI}**",
            "",
            "You said:",
            "",
            quoted,
            "",
            f"Earlier turns in this conversation: {turns}.",
        ]
        lines += [f"- {n}" for n in notes]
        answer = "\n".join(lines)
    run.emit("text_start")
    run.emit("text_chunk", text=answer[:200])
    history += [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]
    if not args.ephemeral:
        atomic_write(history_path, json.dumps(history).encode())
    if run.cost is not None:
        run.emit("run_spend", costUSD=run.cost)
    run.emit("complete")
    run.envelope(True, answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
