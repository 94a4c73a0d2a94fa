"""One run: the turn, its envelopes, its timeout and its signals.

Why it exists: this is the runner's state between reading the prompt and printing the
envelope (the prompt, the history, what the directives did, the spend) and the order of a
turn's events. The directives' handlers (:mod:`.pretend`, :mod:`.people`, :mod:`.faults`)
act on it; :mod:`.cli` sets it up and maps how it ends to an exit code.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from collections.abc import Callable
from typing import Any, NoReturn

from . import faults, people, pretend
from .clock import Clock
from .contract import NOT_AN_AI, Finished
from .directives import directives
from .home import atomic_write, safe_name
from .output import Output
from .stdin import Stdin

ECHO_MAX_CHARS = 20_000  # the default answer quotes at most this much of the prompt


class Run:
    """One turn of one conversation, from the first stdin line to the envelope."""

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

    # -- the turn ---------------------------------------------------------------------------
    def turn(self) -> None:
        self.out.event("stream_start", model="reference (not an AI)", agent=self.args.agent)
        self.out.event("thinking_start")
        self.out.event("thinking_chunk", text="Reading the directives in the prompt.")
        self.out.event("thinking_complete")
        self.out.stderr(f"reference runner: pid {os.getpid()} started (this line is not JSON)")
        for name, rest in directives(self.prompt):
            handler = HANDLERS.get(name)
            if handler is None:
                note = f"unknown directive !{name} ignored (send !directives for the list)"
                self.notes.append(note)
            else:
                handler(self, rest)
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


Handler = Callable[[Run, str], None]
HANDLERS: dict[str, Handler] = {  # one per entry of directives.DIRECTIVES, and !help
    "directives": pretend.do_directives,
    "help": pretend.do_directives,  # Slack's adapter takes it for the gateway's /help
    "tools": pretend.do_tools,
    "subagent": pretend.do_subagent,
    "delay": pretend.do_delay,
    "approve": people.do_approve,
    "approve2": people.do_approve2,
    "ask": people.do_ask,
    "secret": people.do_secret,
    "artifact": pretend.do_artifact,
    "cost": pretend.do_cost,
    "long": pretend.do_long,
    "env": pretend.do_env,
    "fail": faults.do_fail,
    "empty": faults.do_empty,
    "crash": faults.do_crash,
    "garbage": faults.do_garbage,
    "big-stdout": faults.do_big_stdout,
    "spawn": faults.do_spawn,
    "ignore-term": faults.do_ignore_term,
}


def quote(prompt: str) -> str:
    """The prompt as a Markdown quote, at most ECHO_MAX_CHARS of it (a pasted log or a 10 MB
    prompt echoed whole made an envelope past the gateway's line limit, JSON escapes
    included)."""
    shown = prompt[:ECHO_MAX_CHARS]
    quoted = "\n".join("> " + line for line in shown.splitlines()) or "> (empty)"
    if len(prompt) > len(shown):
        quoted += f"\n\n({len(prompt) - len(shown):,} more characters not echoed)"
    return quoted


def words(text: str) -> int:
    return len(text.split())
