"""Progress: runner events folded into one status line, and the turn's summary line.

The status line says what the agent is doing (tools used, sub-agents, rounds, elapsed)
without the chatter of every event; the surface shows it as an edited bubble, or, where it
can't edit, as an occasional "still working" line. The summary closes the turn: tools,
tokens, and the cost or "price unavailable". Tool names are the runner's, shown as code: a
name such as ``*glob*`` reads as itself, not as Markdown.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from ..markdown import code_span
from ..runner import RunnerEvent, RunResult

TOOL_START = frozenset({"tool_execution_start", "tool_call"})


@dataclass
class ProgressState:
    started: float = field(default_factory=time.monotonic)
    tools: Counter[str] = field(default_factory=Counter)
    subagents: int = 0
    rounds: int = 0
    thinking: bool = False
    waiting: bool = False
    version: int = 0  # bumped on every visible change
    _seen_calls: set[str] = field(default_factory=set)

    def update(self, event: RunnerEvent) -> bool:
        """Fold one event in; True when the status line would read differently."""
        data, kind = event.data, event.type
        before = self.signature()
        if kind in TOOL_START:
            call = data.get("toolCallId") or data.get("id")
            if not (isinstance(call, str) and call in self._seen_calls):
                if isinstance(call, str):
                    self._seen_calls.add(call)
                name = data.get("toolName") or data.get("name") or "tool"
                self.tools[str(name)] += 1
            self.thinking = False
        elif kind == "subagent_start":
            self.subagents += 1
        elif kind == "stream_start":
            self.rounds += 1
        elif kind == "thinking_start":
            self.thinking = True
        elif kind in ("thinking_complete", "text_start"):
            self.thinking = False
        elif kind in ("approval_required", "user_input_required", "user_secret_required"):
            self.waiting = True
        elif kind in ("approval_resolved",):
            self.waiting = False
        changed = self.signature() != before
        if changed:
            self.version += 1
        return changed

    def signature(self) -> tuple[object, ...]:
        return (
            tuple(sorted(self.tools.items())),
            self.subagents,
            self.rounds,
            self.thinking,
            self.waiting,
        )

    def tool_summary(self) -> str:
        total = sum(self.tools.values())
        if not total:
            return ""
        names = ", ".join(
            f"{code_span(name)} x{n}" if n > 1 else code_span(name)
            for name, n in self.tools.most_common(4)
        )
        more = " …" if len(self.tools) > 4 else ""
        return f"{total} tool{'s' if total != 1 else ''} ({names}{more})"

    def line(self, now: float | None = None) -> str:
        elapsed = int((now or time.monotonic()) - self.started)
        parts = [
            "waiting for you" if self.waiting else ("thinking" if self.thinking else "working")
        ]
        tools = self.tool_summary()
        if tools:
            parts.append(tools)
        if self.subagents:
            parts.append(f"{self.subagents} sub-agent{'s' if self.subagents != 1 else ''}")
        if self.rounds > 1:
            parts.append(f"round {self.rounds}")
        parts.append(_live_duration(elapsed))
        return "⏳ " + " · ".join(parts)


def _live_duration(seconds: int) -> str:
    """Elapsed time on a live bubble, coarse enough that it alone changes the bubble at
    most every 5 seconds in the first minute and once a minute after: each change is an
    edit, and platforms allow few (Telegram ~20 messages a minute in a group, Slack's
    chat.update ~50 a minute per workspace), for runs that may wait an hour for a person."""
    if seconds < 60:
        return f"{seconds // 5 * 5}s"
    return f"{seconds // 60}m"


def _duration(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds}s"
    return f"{seconds // 60}m {seconds % 60:02d}s"


def cost_text(cost_usd: float, cost_known: bool) -> str:
    if not cost_known:
        return "price unavailable"
    return f"${cost_usd:.4f}" if cost_usd < 1 else f"${cost_usd:.2f}"


def summary(result: RunResult, state: ProgressState) -> str:
    """The closing line of a turn."""
    parts = []
    tools = len(result.tool_calls) or sum(state.tools.values())
    if tools:
        parts.append(f"{tools} tool{'s' if tools != 1 else ''}")
    if state.subagents:
        parts.append(f"{state.subagents} sub-agent{'s' if state.subagents != 1 else ''}")
    if result.total_tokens:
        parts.append(f"{result.total_tokens:,} tokens")
    parts.append(cost_text(result.cost_usd, result.cost_known))
    parts.append(_duration(result.duration_ms // 1000))
    mark = "✓" if result.ok else "✗"
    return f"{mark} " + " · ".join(parts)
