"""The reference runner: speaks the ``jazz run --json`` contract, and is not an AI.

Why it exists: the real ``jazz`` is a TypeScript/Bun program that cannot be installed on
every machine. The package ships this stand-in so that ``jazz-bridge serve`` works on a
fresh machine, and so that tests can drive every path of the contract
(``docs/runner-contract.md``): events, approvals, questions, secrets, artifacts,
failures, crashes, timeouts, signals and leftover processes. It says plainly in every
answer that it is not an AI. It is stdlib-only (no third-party import, so it starts fast
and can be copied next to the homes and started by conversation accounts with any
Python 3.11+), and it never imports the rest of ``bridge``.

Invocation (the chat text never goes on argv)::

    jazz-reference-runner run --json --no-tui --agent AGENT --conversation KEY
        --approval-policy read-only|low-risk|high-risk
        --events tools,reasoning,text,approval,subagent,spend
        --interactive-stdin --input-stdin --timeout MS
        [--ephemeral] [--park] [--auto-approve-tools a,b] [--timezone TZ]
        [--max-iterations N] [--max-cost-usd X] [--max-tokens N] [--max-duration-ms N]
        [--data-dir PATH]

``--timezone`` and the ``--max-*`` caps are checked for shape and otherwise ignored;
``--auto-approve-tools`` approves those tools without asking, and ``--approval-policy
read-only`` declines every approval without asking; without ``--interactive-stdin`` every
prompt for a person counts as unanswered.

The first stdin line is ``{"prompt": "..."}`` (``"history"`` only with ``--ephemeral``,
``"attachments"`` a list of paths). Later stdin lines are answer frames
(``approval_decision``, ``user_input_response``, ``user_secret_response``) and may come at
any time. History lives in ``$JAZZ_HOME/history/<safe key>.json`` (``--data-dir``
overrides ``JAZZ_HOME``), written atomically with Jazz's modes: 0600/0700, or 0640/0750
where the directory written into has the setgid bit. Events go to stderr as NDJSON, only
for the requested categories; ``error``, ``log``, the usage events (``stream_start``,
``usage_update``, ``complete``) and the prompts for a person always come, and so does one
line of log noise that is not JSON. One envelope goes to stdout, last. Time spent waiting
for a person does not count against ``--timeout``. SIGTERM/SIGINT print an
``interrupted`` envelope and exit 143/130. Exit codes: 0 answer, 1 failure, 2 parked
(``--park``), 3 ``!crash``.

Without directives the answer says it is the reference runner, quotes the prompt (at most
``ECHO_MAX_CHARS`` of it) and counts the conversation's earlier turns. A home the run cannot
write is a failure naming it before anything else happens. Directives steer it (one per
line or inline, each starting a word with ``!``; an argument runs to the end of the line or
the next directive):

  !directives      list the directives (``!help`` too, where the chat lets it through:
                   Slack's adapter takes ``!help`` for the gateway's own ``/help``)
  !tools N         N pretend tool calls (tool events and the envelope's toolCalls)
  !subagent        a sub-agent start/complete pair
  !delay S         work S seconds (float), a text_chunk/usage_update every 0.2 s
  !approve TOOL    ask to approve TOOL and wait for the decision
  !approve2 TOOL   two approvals (TOOL and write), both pending before either is answered
  !ask QUESTION    ask a question with suggestions and wait for the response
  !secret NAME     ask for a secret (never echoed: only its length is reported)
  !artifact NAME   write $JAZZ_HOME/workspace/NAME (a real PNG if NAME ends .png), list it
  !cost X          report a known cost of X US dollars (default: unpriced, 0)
  !long N          an answer of about N characters: paragraphs and fenced code blocks
  !env             list the environment's variable names (not values), ids and umask
  !fail [MSG]      a failure envelope, code "failed", exit 1
  !empty           a failure envelope, code "empty_response", exit 1
  !crash           exit 3 with no envelope (traceback-like noise on stderr)
  !garbage         non-JSON garbage on stdout, no envelope, exit 1
  !big-stdout MB   MB megabytes of junk on stdout before the envelope
  !spawn S         leave a child (same group) and a setsid grandchild running S seconds
  !ignore-term     ignore SIGTERM and hang (at most 300 s) until killed
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import select
import signal
import stat
import struct
import sys
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any, NoReturn

NOT_AN_AI = "This is the jazz-bridge reference runner, not an AI."
CATEGORIES: dict[str, frozenset[str]] = {
    "tools": frozenset(
        {"tools_detected", "tool_call", "tool_execution_start", "tool_execution_complete"}
    ),
    "reasoning": frozenset({"thinking_start", "thinking_chunk", "thinking_complete"}),
    "text": frozenset({"text_start", "text_chunk"}),
    "usage": frozenset({"stream_start", "usage_update", "complete"}),
    "approval": frozenset(
        {
            "command_risk_classifying",
            "command_risk_classified",
            "approval_required",
            "approval_resolved",
        }
    ),
    "subagent": frozenset({"subagent_start", "subagent_complete", "subagent_result"}),
    "spend": frozenset({"run_spend"}),
}
ALWAYS = frozenset(  # the prompts that need a person come whatever --events asks for
    {"error", "log", "approval_required", "user_input_required", "user_secret_required"}
    | CATEGORIES["usage"]
)
POLICIES = ("read-only", "low-risk", "high-risk")
DIRECTIVES = (
    ("directives", "", "list the directives (also `!help`, except on Slack)"),
    ("tools", "N", "N pretend tool calls (events and the envelope's toolCalls)"),
    ("subagent", "", "a sub-agent start/complete pair"),
    ("delay", "S", "work S seconds, with progress events every 0.2 s"),
    ("approve", "TOOL", "ask to approve TOOL and wait for the decision"),
    ("approve2", "TOOL", "two approvals at once (TOOL and write)"),
    ("ask", "QUESTION", "ask a question with suggestions and wait for the response"),
    ("secret", "NAME", "ask for a secret (only its length is reported)"),
    ("artifact", "NAME", "write workspace/NAME (a PNG if it ends .png) and list it"),
    ("cost", "X", "report a known cost of X US dollars"),
    ("long", "N", "an answer of about N characters with code blocks"),
    ("env", "", "list environment variable names, uid, gid, groups and umask"),
    ("fail", "[MSG]", "a failure envelope (exit 1)"),
    ("empty", "", "an empty_response failure (exit 1)"),
    ("crash", "", "exit 3 without an envelope"),
    ("garbage", "", "garbage on stdout, no envelope (exit 1)"),
    ("big-stdout", "MB", "MB megabytes of junk on stdout before the envelope"),
    ("spawn", "S", "leave a child and a setsid grandchild running S seconds"),
    ("ignore-term", "", "ignore SIGTERM and hang until killed (at most 300 s)"),
)
DIRECTIVE_RE = re.compile(
    r"(?<!\S)!([a-z][a-z0-9-]*)(?![\w-])(?:[ \t]+(?!![a-z])((?:(?![ \t]+![a-z])[^\n])*))?",
    re.IGNORECASE,
)
COUNT_RE = re.compile(r"[0-9]+")
ANSWER_KEYS = {
    "approval_decision": "toolCallId",
    "user_input_response": "requestId",
    "user_secret_response": "requestId",
}
READ_CHUNK = 1024 * 1024  # stdin is read this much at a time
ECHO_MAX_CHARS = 20_000  # the default answer quotes at most this much of the prompt
MAX_SELF_S = 300.0  # nothing this runner does on its own lasts longer (delays, hangs, spawns)
MAX_PERSON_WAIT_S = 3600.0  # a prompt nobody answers for this long counts as unanswered
MAX_TOOLS = 100
MAX_LONG = 1_000_000
MAX_BIG_STDOUT_MB = 256.0
MEDIA_TYPES = {
    ".png": "image/png",
    ".txt": "text/plain",
    ".md": "text/markdown",
    ".json": "application/json",
    ".csv": "text/csv",
    ".html": "text/html",
}
SPAWN_CHILD = """\
import os, subprocess, sys, time
grandchild = subprocess.Popen(
    sys.argv[2:], start_new_session=True,
    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)
os.write(1, b"%d\\n" % grandchild.pid)
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
time.sleep(float(sys.argv[1]))
"""
PYTHON_SLEEP = "import sys, time; time.sleep(float(sys.argv[1]))"


class Finished(Exception):
    """Unwinds the run with an exit code once its envelope (or its absence) is settled."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class BadInput(Exception):
    """Bad flags or a bad first stdin line: a failure envelope, exit 1."""


class HomeError(Exception):
    """A path in the home this account cannot write: the message names it and why."""


# -- output ---------------------------------------------------------------------------------


class Output:
    """stdout and stderr, one writer at a time, and at most one envelope."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.categories: set[str] = set()
        self.envelope_written = False

    def event(self, type_: str, **data: Any) -> None:
        if type_ in ALWAYS or any(type_ in CATEGORIES[c] for c in self.categories):
            self.stderr(json.dumps({"type": type_, **data}))

    def stderr(self, line: str) -> None:
        with self.lock:
            try:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass

    def stdout_bytes(self, data: bytes) -> None:
        with self.lock:
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()

    def envelope(self, env: dict[str, Any], *, fresh_line: bool = False) -> bool:
        """Print the envelope unless one was printed; False if it was."""
        with self.lock:
            if self.envelope_written:
                return False
            self.envelope_written = True
            # a signal or the timeout may cut in between two writes of other output
            text = ("\n" if fresh_line else "") + json.dumps(env) + "\n"
            try:
                sys.stdout.write(text)
                sys.stdout.flush()
            except (OSError, ValueError):
                pass
            return True


def bare_failure(message: str, code: str = "failed") -> dict[str, Any]:
    return {
        "ok": False,
        "code": code,
        "error": message,
        "costUSD": 0.0,
        "costKnown": False,
        "tokenUsage": {"promptTokens": 0, "completionTokens": 0, "totalTokens": 0},
        "toolCalls": [],
        "artifacts": [],
    }


# -- time: the timeout clock pauses while a person is asked ---------------------------------


class Clock:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0.0
        self._since: float | None = time.monotonic()
        self._waiting = 0

    def pause(self) -> None:
        with self._lock:
            self._waiting += 1
            if self._since is not None:
                self._active += time.monotonic() - self._since
                self._since = None

    def resume(self) -> None:
        with self._lock:
            self._waiting = max(0, self._waiting - 1)
            if self._waiting == 0 and self._since is None:
                self._since = time.monotonic()

    def active(self) -> float:
        with self._lock:
            running = time.monotonic() - self._since if self._since is not None else 0.0
            return self._active + running


# -- stdin: the first line, then answer frames at any time ----------------------------------


class Stdin:
    """Lines from fd 0 read with ``os.read`` (no buffered-reader lock a daemon thread holds)."""

    def __init__(self, fd: int = 0) -> None:
        self.fd = fd
        self.buf = b""
        self.cond = threading.Condition()
        self.frames: dict[tuple[str, str], dict[str, Any]] = {}
        self.eof = False

    def readline(self) -> bytes | None:
        """One line; in linear time (only new bytes are searched, joined once at the end)."""
        chunks = [self.buf]
        found = b"\n" in self.buf
        while not found:
            try:
                chunk = os.read(self.fd, READ_CHUNK)
            except OSError:
                chunk = b""
            if not chunk:
                rest = b"".join(chunks)
                self.buf = b""
                return rest or None
            chunks.append(chunk)
            found = b"\n" in chunk
        line, self.buf = b"".join(chunks).split(b"\n", 1)
        return line

    def pump(self, out: Output) -> None:
        """The reader thread: keep every answer frame until someone waits for it."""
        try:
            while (raw := self.readline()) is not None:
                line = raw.strip()
                if not line:
                    continue
                try:
                    frame = json.loads(line)
                except (ValueError, RecursionError):  # nested past the stack is no frame either
                    out.stderr(
                        f"reference runner: ignored a stdin line that is not JSON: {line[:80]!r}"
                    )
                    continue
                kind = frame.get("type") if isinstance(frame, dict) else None
                key = ANSWER_KEYS.get(kind) if isinstance(kind, str) else None
                ident = frame.get(key) if key else None
                if not isinstance(kind, str) or not isinstance(ident, str):
                    out.stderr("reference runner: ignored a stdin frame it has no use for")
                    continue
                with self.cond:
                    self.frames[(kind, ident)] = frame
                    self.cond.notify_all()
        finally:
            with self.cond:
                self.eof = True
                self.cond.notify_all()

    def wait(self, kind: str, ident: str) -> dict[str, Any] | None:
        """The answer frame of one prompt; None at EOF or after MAX_PERSON_WAIT_S."""
        deadline = time.monotonic() + MAX_PERSON_WAIT_S
        with self.cond:
            while (kind, ident) not in self.frames and not self.eof:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(min(left, 1.0))
            return self.frames.pop((kind, ident), None)


# -- files: Jazz's modes, atomic replace -----------------------------------------------------


def safe_name(key: str) -> str:
    """A file name for a conversation key: a readable prefix plus a sha256 prefix."""
    prefix = re.sub(r"[^a-z0-9._-]+", "-", key.lower()).strip("-.")[:40] or "conversation"
    return f"{prefix}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def modes_for(directory: str) -> tuple[int, int]:
    """Jazz's rule: files 0600, dirs 0700; in a setgid directory keep group read (0640/0750)."""
    try:
        setgid = bool(os.stat(directory).st_mode & stat.S_ISGID)
    except OSError:
        setgid = False
    return (0o640, 0o750) if setgid else (0o600, 0o700)


def ensure_dir(path: str) -> None:
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    if parent and parent != path:
        ensure_dir(parent)
    _, mode = modes_for(parent)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        return
    # the umask may have taken bits; a setgid parent's bit is inherited and kept
    os.chmod(path, mode | (os.stat(path).st_mode & stat.S_ISGID))


def fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def ensure_home(home: str) -> None:
    """The home exists (made with Jazz's modes) and this account can write into it.

    Checked before the turn, so nobody is asked to approve anything in a run that could
    never save its history; the error names the path and the account."""
    try:
        ensure_dir(home)
    except OSError as exc:
        raise HomeError(
            f"cannot create JAZZ_HOME {home}: {exc.strerror} (uid {os.getuid()}); "
            "make it, or its parent, writable by the run's account"
        ) from exc
    if not os.path.isdir(home):
        raise HomeError(f"JAZZ_HOME {home} is not a directory")
    if not os.access(home, os.W_OK | os.X_OK):
        raise HomeError(
            f"JAZZ_HOME {home} is not writable by uid {os.getuid()}; "
            "give the run's account write access to it"
        )


def atomic_write(path: str, data: bytes) -> None:
    """Write ``path`` whole, or raise HomeError naming it (the reason included)."""
    try:
        _atomic_write(path, data)
    except OSError as exc:
        raise HomeError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _atomic_write(path: str, data: bytes) -> None:
    """Write a temp file, fsync, rename into place, fsync the directory."""
    directory = os.path.dirname(path)
    ensure_dir(directory)
    file_mode, _ = modes_for(directory)
    tmp = os.path.join(
        directory, f".{os.path.basename(path)}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    )
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, file_mode)
    try:
        os.fchmod(fd, file_mode)  # whatever the umask took
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(directory)


def load_history(path: str, out: Output) -> list[dict[str, str]]:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise BadInput(f"cannot read the history {path}: {exc.strerror}") from exc
    try:
        loaded = json.loads(raw)
        if not valid_history(loaded):
            raise ValueError("not a list of {role, content}")
    except ValueError as exc:
        aside = f"{path}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}"
        os.replace(path, aside)
        out.stderr(f"reference runner: unreadable history {path} ({exc}) moved to {aside}")
        return []
    return list(loaded)


def valid_history(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(h, dict)
        and h.get("role") in ("user", "assistant")
        and isinstance(h.get("content"), str)
        for h in value
    )


def tiny_png(width: int = 8, height: int = 8) -> bytes:
    """A valid RGB PNG, written by hand."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    rows = b"".join(
        b"\x00" + b"".join(bytes((32 * x % 256, 32 * y % 256, 192)) for x in range(width))
        for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


# -- arguments -------------------------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise BadInput(f"bad arguments: {message}")


def _events(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in CATEGORIES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown event categories {','.join(unknown)} (known: {','.join(CATEGORIES)})"
        )
    return names


def _nonneg_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return number


def _nonneg_float(value: str) -> float:
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(f"{value} is not a non-negative number")
    return number


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = Parser(prog="jazz-reference-runner", allow_abbrev=False, description=NOT_AN_AI)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", allow_abbrev=False, help="run one turn (the jazz run contract)")
    for flag in ("--json", "--no-tui", "--interactive-stdin", "--input-stdin"):
        run.add_argument(flag, action="store_true")
    run.add_argument("--ephemeral", action="store_true")
    run.add_argument("--park", action="store_true")
    run.add_argument("--agent", default="default")
    run.add_argument("--conversation")
    run.add_argument("--approval-policy", choices=POLICIES, default="low-risk")
    run.add_argument("--events", type=_events, default=[])
    run.add_argument("--timeout", type=_nonneg_int, default=0, metavar="MS")
    run.add_argument("--auto-approve-tools", default="")
    run.add_argument("--timezone")
    run.add_argument("--max-iterations", type=_nonneg_int)
    run.add_argument("--max-cost-usd", type=_nonneg_float)
    run.add_argument("--max-tokens", type=_nonneg_int)
    run.add_argument("--max-duration-ms", type=_nonneg_int)
    run.add_argument("--data-dir")
    return parser.parse_args(argv)


def count_arg(rest: str, default: int, limit: int) -> int:
    """A directive's count typed in a chat: ASCII digits, capped at ``limit``; else default.

    (``str.isdigit`` accepts superscripts ``int`` refuses, and ``int`` refuses thousands of
    digits: either was a runner crash.)"""
    if not COUNT_RE.fullmatch(rest):
        return default
    return limit if len(rest) > len(str(limit)) else min(int(rest), limit)


def amount_arg(rest: str, default: float, limit: float) -> float:
    """A directive's amount (seconds, megabytes) in ``[0, limit]``; default if not a number."""
    try:
        value = float(rest) if rest else default
    except ValueError:
        return default
    if math.isnan(value):
        return default
    return min(max(value, 0.0), limit)


def directives(prompt: str) -> list[tuple[str, str]]:
    """``!name argument`` directives in order (the argument ends at a newline or directive)."""
    return [(m.group(1).lower(), (m.group(2) or "").strip()) for m in DIRECTIVE_RE.finditer(prompt)]


def words(text: str) -> int:
    return len(text.split())


# -- one run ---------------------------------------------------------------------------------


class Run:
    def __init__(self, args: argparse.Namespace, out: Output, stdin: Stdin) -> None:
        self.args = args
        self.out = out
        self.stdin = stdin
        self.clock = Clock()
        self.home = ""
        self.prompt = ""
        self.history: list[dict[str, str]] = []
        self.attachments: list[str] = []
        self.tool_calls: list[dict[str, Any]] = []
        self.artifacts: list[dict[str, Any]] = []
        self.cost: float | None = None
        self.notes: list[str] = []
        self.answer_override: str | None = None
        self.timeout_armed = bool(args.timeout)
        self.auto_approve = {t.strip() for t in args.auto_approve_tools.split(",") if t.strip()}
        self._ids = 0

    # -- envelopes ------------------------------------------------------------------------
    def spend(self, answer: str = "") -> dict[str, Any]:
        prompt_tokens = words(self.prompt) + sum(words(h["content"]) for h in self.history)
        completion = words(answer)
        return {
            "costUSD": self.cost if self.cost is not None else 0.0,
            "costKnown": self.cost is not None,
            "tokenUsage": {
                "promptTokens": prompt_tokens,
                "completionTokens": completion,
                "totalTokens": prompt_tokens + completion,
            },
            "toolCalls": self.tool_calls,
            "artifacts": self.artifacts,
        }

    def failure(self, code: str, error: str, **extra: Any) -> dict[str, Any]:
        return {"ok": False, "code": code, "error": error, **self.spend(), **extra}

    def fail(self, code: str, error: str, exit_code: int = 1, **extra: Any) -> NoReturn:
        self.out.envelope(self.failure(code, error, **extra))
        raise Finished(exit_code)

    def next_id(self, kind: str) -> str:
        self._ids += 1
        return f"{kind}-{os.getpid()}-{self._ids}"

    # -- timeout and signals ----------------------------------------------------------------
    def watchdog(self) -> None:
        limit = self.args.timeout / 1000
        while True:
            left = limit - self.clock.active()
            if left <= 0 and self.timeout_armed:
                error = (
                    f"timed out after {self.args.timeout} ms "
                    "(time spent waiting for a person not counted)"
                )
                self.out.event("error", message=error)
                if self.out.envelope(self.failure("failed", error), fresh_line=True):
                    os._exit(1)
                return
            time.sleep(min(max(left, 0.01), 0.05))

    def on_signal(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        env = self.failure("interrupted", f"interrupted by {name}", signal=name)
        if self.out.envelope(env, fresh_line=True):
            os._exit(130 if signum == signal.SIGINT else 143)

    # -- people -----------------------------------------------------------------------------
    def park(self, pending: list[dict[str, Any]]) -> NoReturn:
        self.out.envelope(
            self.failure(
                "failed",
                "parked: waiting for a person",
                parked=True,
                status="input-required",
                pending=pending,
            )
        )
        raise Finished(2)

    def ask_person(self, events: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
        """Emit every prompt, then wait for each answer (None: unanswered); clock paused."""
        if self.args.park:
            self.park(events)
        if not self.args.interactive_stdin:
            return [None for _ in events]
        for event in events:
            self.clock.pause()
            self.out.event(event["type"], **{k: v for k, v in event.items() if k != "type"})
        answers: list[dict[str, Any] | None] = []
        for event in events:
            kind = {
                "approval_required": "approval_decision",
                "user_input_required": "user_input_response",
                "user_secret_required": "user_secret_response",
            }[event["type"]]
            ident = event.get("toolCallId") or event["requestId"]
            try:
                answers.append(self.stdin.wait(kind, ident))
            finally:
                self.clock.resume()
        return answers

    # -- directives -------------------------------------------------------------------------
    def do_directives(self, _rest: str) -> None:
        lines = [f"**{NOT_AN_AI}**", "", "It answers by echoing. Directives in a message:", ""]
        lines += [
            f"- `!{name}{' ' + arg if arg else ''}`: {what}" for name, arg, what in DIRECTIVES
        ]
        self.answer_override = "\n".join(lines)

    def do_tools(self, rest: str) -> None:
        count = count_arg(rest, 1, MAX_TOOLS)
        names = ["read_file", "bash", "web_search"]
        self.out.event("tools_detected", count=count)
        for i in range(count):
            call_id = self.next_id("call")
            tool = names[i % len(names)]
            arguments = json.dumps({"n": i + 1, "note": "pretend"})
            self.out.event("tool_call", toolCallId=call_id, toolName=tool, arguments=arguments)
            self.out.event("tool_execution_start", toolCallId=call_id, toolName=tool)
            self.out.event(
                "tool_execution_complete",
                toolCallId=call_id,
                toolName=tool,
                result="ok (pretend)",
                durationMs=1,
            )
            self.tool_calls.append({"id": call_id, "name": tool, "arguments": arguments})
        self.notes.append(f"ran {count} pretend tool call(s)")

    def do_subagent(self, rest: str) -> None:
        ident = self.next_id("subagent")
        task = rest or "look something up"
        self.out.event("subagent_start", subagentId=ident, name="helper", task=task)
        self.out.event("subagent_complete", subagentId=ident, name="helper", result="done")
        self.notes.append("ran a pretend sub-agent")

    def do_delay(self, rest: str) -> None:
        seconds = amount_arg(rest, 1.0, MAX_SELF_S)
        self.work(seconds)
        self.notes.append(f"worked {seconds:g} s")

    def work(self, seconds: float) -> None:
        start = time.monotonic()
        end = start + seconds
        n = 0
        while (now := time.monotonic()) < end:
            n += 1
            self.out.event("text_chunk", text=f"working… {now - start:.1f}s ")
            self.out.event("usage_update", completionTokens=n, totalTokens=n)
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))

    def approvals(self, tools: list[str]) -> None:
        events: list[dict[str, Any]] = []
        asked: list[str] = []
        results: dict[str, bool] = {}
        for tool in tools:
            ident = self.next_id("approval")
            self.out.event("command_risk_classifying", toolCallId=ident, toolName=tool)
            self.out.event("command_risk_classified", toolCallId=ident, risk="low-risk")
            if tool in self.auto_approve:
                results[ident] = True
                self.out.event("approval_resolved", toolCallId=ident, approved=True, auto=True)
            elif self.args.approval_policy == "read-only":
                results[ident] = False  # above the tier: declined without asking
                self.out.event("approval_resolved", toolCallId=ident, approved=False, auto=True)
            else:
                asked.append(ident)
                events.append(
                    {
                        "type": "approval_required",
                        "toolCallId": ident,
                        "toolName": tool,
                        "message": f"The reference runner wants to run {tool} (pretend).",
                        "preview": f"$ {tool} --pretend",
                    }
                )
            results.setdefault(ident, False)
        answers = self.ask_person(events) if events else []
        for ident, got in zip(asked, answers, strict=True):
            approved = bool(got and got.get("approved") is True)
            results[ident] = approved
            self.out.event("approval_resolved", toolCallId=ident, approved=approved)
        for tool, ident in zip(tools, results, strict=True):
            verdict = "approved" if results[ident] else "declined"
            self.notes.append(f"{tool} was {verdict}")
            if results[ident]:
                arguments = json.dumps({"tool": tool})
                self.tool_calls.append({"id": ident, "name": tool, "arguments": arguments})

    def do_approve(self, rest: str) -> None:
        self.approvals([rest or "bash"])

    def do_approve2(self, rest: str) -> None:
        self.approvals([rest or "bash", "write"])

    def do_ask(self, rest: str) -> None:
        ident = self.next_id("question")
        (got,) = self.ask_person(
            [
                {
                    "type": "user_input_required",
                    "requestId": ident,
                    "question": rest or "Which colour?",
                    "suggestions": [
                        {"value": "red", "label": "Red"},
                        {"value": "blue", "label": "Blue"},
                    ],
                    "allowCustom": True,
                }
            ]
        )
        response = got.get("response") if got else None
        if isinstance(response, str) and response.strip():
            self.notes.append(f"you answered: {response}")
        else:
            self.notes.append("the question was declined")

    def do_secret(self, rest: str) -> None:
        ident = self.next_id("secret")
        name = rest or "a token"
        (got,) = self.ask_person(
            [
                {
                    "type": "user_secret_required",
                    "requestId": ident,
                    "name": name,
                    "message": f"The reference runner asks for {name} (it only counts it).",
                }
            ]
        )
        if got is None:
            why = "stdin closed" if self.args.interactive_stdin else "not interactive"
            self.notes.append(f"no secret is available here ({why})")
        elif isinstance(got.get("value"), str) and got["value"] and not got.get("declined"):
            self.notes.append(f"got a secret of {len(got['value'])} characters (not shown)")
        elif got.get("unavailable"):
            self.notes.append(f"no secret is available here ({got['unavailable']})")
        else:
            self.notes.append("the secret was declined")

    def do_artifact(self, rest: str) -> None:
        name = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(rest) or "artifact.txt")
        if name.startswith("."):
            name = "artifact" + name
        path = os.path.join(self.home, "workspace", name)
        ext = os.path.splitext(name)[1].lower()
        media = MEDIA_TYPES.get(ext, "text/plain")
        data = tiny_png() if ext == ".png" else f"{NOT_AN_AI}\nartifact {name}\n".encode()
        try:
            atomic_write(path, data)
        except HomeError as exc:  # a tool that failed: the turn goes on and says so
            self.notes.append(f"could not write workspace/{name}: {exc}")
            return
        self.artifacts.append(
            {
                "kind": "file",
                "path": path,
                "mediaType": media,
                "tool": "reference",
                "source": "rendered",
            }
        )
        self.notes.append(f"wrote workspace/{name} ({len(data)} bytes)")

    def do_cost(self, rest: str) -> None:
        try:
            self.cost = _nonneg_float(rest)
        except (ValueError, argparse.ArgumentTypeError):
            self.notes.append(f"ignored !cost {rest!r} (not a non-negative number)")

    def do_long(self, rest: str) -> None:
        size = count_arg(rest, 5000, MAX_LONG)
        parts: list[str] = [f"**{NOT_AN_AI}** Here is a long answer of about {size} characters."]
        total = len(parts[0])
        while total < size:
            i = len(parts)
            if i % 4 == 3:
                body = "\n".join(f"line_{i}_{j} = {j}  # pretend code" for j in range(20))
                part = f"```python\n{body}\n```"
            else:
                part = f"Paragraph {i}. " + "The reference runner repeats itself. " * 10
            parts.append(part.strip())
            total += len(parts[-1]) + 2
        self.answer_override = "\n\n".join(parts)

    def do_env(self, _rest: str) -> None:
        mask = os.umask(0o077)
        os.umask(mask)
        self.notes.append("environment variables (names only): " + ", ".join(sorted(os.environ)))
        self.notes.append(
            f"uid={os.getuid()} gid={os.getgid()} euid={os.geteuid()} egid={os.getegid()} "
            f"groups={sorted(os.getgroups())} umask={mask:04o}"
        )
        self.notes.append(f"cwd={os.getcwd()} JAZZ_HOME={self.home}")

    def do_fail(self, rest: str) -> None:
        self.fail("failed", rest or "the reference runner was told to fail")

    def do_empty(self, _rest: str) -> None:
        self.fail("empty_response", "the answer was empty")

    def do_crash(self, _rest: str) -> None:
        self.out.stderr(
            "Traceback (most recent call last):\n"
            '  File "reference_runner.py", line 1, in <module>\n'
            "RuntimeError: the reference runner was told to crash"
        )
        raise Finished(3)

    def do_garbage(self, _rest: str) -> None:
        self.out.stdout_bytes(b"%%% this is not an envelope %%%\n<html>garbage</html>\n")
        raise Finished(1)

    def do_big_stdout(self, rest: str) -> None:
        megabytes = amount_arg(rest, 1.0, MAX_BIG_STDOUT_MB)
        line = b"j" * 1023 + b"\n"
        block = line * 64  # 64 KiB, whole lines
        left = int(megabytes * 1024 * 1024)
        while left > 0:
            piece = block[: min(left, len(block))]
            if len(piece) < len(block) and not piece.endswith(b"\n"):
                piece = piece[:-1] + b"\n"
            self.out.stdout_bytes(piece)
            left -= len(piece)
        self.notes.append(f"wrote {megabytes:g} MB of junk to stdout")

    def do_spawn(self, rest: str) -> None:
        import shutil
        import subprocess

        seconds = amount_arg(rest, 60.0, MAX_SELF_S)
        sleeper = shutil.which("sleep")
        grand_argv = (
            [sleeper, f"{seconds:g}"]
            if sleeper
            else [sys.executable, "-c", PYTHON_SLEEP, f"{seconds:g}"]
        )
        child = subprocess.Popen(
            [sys.executable, "-c", SPAWN_CHILD, f"{seconds:g}", *grand_argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], 10.0)
        line = child.stdout.readline() if ready else b""
        child.stdout.close()
        pids = [child.pid] + ([int(line)] if line.strip().isdigit() else [])
        self.out.event("log", message="spawned a child and a setsid grandchild", pids=pids)
        self.notes.append(f"left {len(pids)} process(es) running for {seconds:g} s: {pids}")

    def do_ignore_term(self, _rest: str) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self.timeout_armed = False  # only SIGKILL (or SIGINT) ends this run now
        self.out.event("log", message="ignoring SIGTERM", pid=os.getpid())
        end = time.monotonic() + MAX_SELF_S
        while time.monotonic() < end:
            time.sleep(0.1)
        self.fail("failed", f"ignored SIGTERM for {MAX_SELF_S:g} s and nobody killed it")

    # -- the turn ---------------------------------------------------------------------------
    def handlers(self) -> dict[str, Callable[[str], None]]:
        found = {name: getattr(self, "do_" + name.replace("-", "_")) for name, _, _ in DIRECTIVES}
        found["help"] = self.do_directives  # Slack's adapter takes it for the gateway's /help
        return found

    def turn(self) -> None:
        self.out.event("stream_start", model="reference (not an AI)", agent=self.args.agent)
        self.out.event("thinking_start")
        self.out.event("thinking_chunk", text="Reading the directives in the prompt.")
        self.out.event("thinking_complete")
        self.out.stderr(f"reference runner: pid {os.getpid()} started (this line is not JSON)")
        handlers = self.handlers()
        for name, rest in directives(self.prompt):
            handler = handlers.get(name)
            if handler is None:
                note = f"unknown directive !{name} ignored (send !directives for the list)"
                self.notes.append(note)
            else:
                handler(rest)
        answer = self.answer_override if self.answer_override is not None else self.default()
        self.timeout_armed = False  # the answer is made: saving it must not be cut short
        self.out.event("text_start")
        for i in range(0, min(len(answer), 4000), 400):
            self.out.event("text_chunk", text=answer[i : i + 400])
        envelope = {"ok": True, "answer": answer, **self.spend(answer), "finishReason": "stop"}
        self.out.event("usage_update", **envelope["tokenUsage"])
        if not self.args.ephemeral:
            turns = [{"role": "user", "content": self.prompt}]
            turns.append({"role": "assistant", "content": answer})
            atomic_write(self.history_path(), json.dumps(self.history + turns).encode())
        self.out.event("run_spend", costUSD=envelope["costUSD"], costKnown=envelope["costKnown"])
        self.out.event("complete", finishReason="stop")
        self.out.envelope(envelope)

    def default(self) -> str:
        turns = sum(1 for h in self.history if h["role"] == "user")
        quoted = quote(self.prompt)
        lines = [
            f"**{NOT_AN_AI}** It only echoes (send `!directives` for what it can pretend).",
            "",
            "You said:",
            "",
            quoted,
            "",
            f"Earlier turns in this conversation: {turns}.",
        ]
        if self.attachments:
            lines.append(f"Attachments: {len(self.attachments)}.")
            for path in self.attachments:
                try:
                    lines.append(f"- {path}: {os.path.getsize(path)} bytes")
                except OSError as exc:
                    lines.append(f"- {path}: unreadable ({exc.strerror})")
        if self.notes:
            lines.append("")
            lines += [f"- {n}" for n in self.notes]
        return "\n".join(lines)

    def history_path(self) -> str:
        return os.path.join(self.home, "history", safe_name(self.args.conversation) + ".json")


def quote(prompt: str) -> str:
    """The prompt as a Markdown quote, at most ECHO_MAX_CHARS of it (a pasted log or a 10 MB
    prompt echoed whole made an envelope past the gateway's line limit, JSON escapes
    included)."""
    shown = prompt[:ECHO_MAX_CHARS]
    quoted = "\n".join("> " + line for line in shown.splitlines()) or "> (empty)"
    if len(prompt) > len(shown):
        quoted += f"\n\n({len(prompt) - len(shown):,} more characters not echoed)"
    return quoted


def read_first_line(stdin: Stdin, ephemeral: bool) -> dict[str, Any]:
    raw = stdin.readline()
    if raw is None:
        raise BadInput('no first stdin line (expected {"prompt": "..."})')
    try:
        frame = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise BadInput(f'the first stdin line must be {{"prompt": "..."}}: {exc}') from exc
    if not isinstance(frame, dict) or not isinstance(frame.get("prompt"), str):
        raise BadInput('the first stdin line must be a JSON object {"prompt": "..."}')
    if "history" in frame:
        if not ephemeral:
            raise BadInput('"history" on stdin is only accepted with --ephemeral')
        if not valid_history(frame["history"]):
            raise BadInput('"history" must be a list of {"role": "user"|"assistant", "content"}')
    attachments = frame.get("attachments", [])
    if not isinstance(attachments, list) or not all(isinstance(a, str) for a in attachments):
        raise BadInput('"attachments" must be a list of paths')
    return frame


def main(argv: list[str] | None = None) -> int:
    out = Output()
    stdin = Stdin()
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except BadInput as exc:
        out.envelope(bare_failure(str(exc)))
        return 1
    out.categories = set(args.events)
    run = Run(args, out, stdin)
    signal.signal(signal.SIGTERM, run.on_signal)
    signal.signal(signal.SIGINT, run.on_signal)
    try:
        try:
            if not args.input_stdin:
                raise BadInput("this runner needs --input-stdin (a prompt never goes on argv)")
            home = args.data_dir or os.environ.get("JAZZ_HOME")
            if not home:
                raise BadInput("JAZZ_HOME (or --data-dir) is not set")
            if not args.conversation and not args.ephemeral:
                raise BadInput("--conversation is required (unless --ephemeral)")
            run.home = os.path.abspath(home)
            frame = read_first_line(stdin, args.ephemeral)
            if not args.ephemeral:
                ensure_home(run.home)
        except (BadInput, HomeError) as exc:
            run.fail("failed", str(exc))
        run.prompt = frame["prompt"]
        run.attachments = list(frame.get("attachments", []))
        threading.Thread(target=stdin.pump, args=(out,), name="stdin", daemon=True).start()
        if args.timeout:
            threading.Thread(target=run.watchdog, name="timeout", daemon=True).start()
        if args.ephemeral:
            run.history = list(frame.get("history", []))
        else:
            try:
                run.history = load_history(run.history_path(), out)
            except BadInput as exc:
                run.fail("failed", str(exc))
        run.turn()
        return 0
    except Finished as done:
        return done.code
    except HomeError as exc:  # the history could not be saved: said plainly, not as a bug
        out.event("error", message=str(exc))
        out.envelope(run.failure("failed", str(exc)))
        return 1
    except Exception as exc:  # a bug here must still end in an envelope, never silence
        import traceback

        out.stderr(traceback.format_exc().rstrip())
        out.event("error", message=f"reference runner error: {exc!r}")
        out.envelope(run.failure("failed", f"reference runner error: {exc!r}"))
        return 1


if __name__ == "__main__":
    sys.exit(main())
