"""Reading the runner's stdout envelope (RUNNER-CONTRACT.md): the last line starting ``{``.

A run that printed no envelope, garbage, or an envelope of the wrong shape becomes a
failure with the exit code and a short reason a person can act on, never silence.
"""

from __future__ import annotations

import json
import math
import re
import signal
from typing import Any

from .base import RunResult

EXIT_MEANINGS = {
    0: "answer produced",
    1: "failure or no usable answer",
    2: "parked, waiting for a person",
    130: "interrupted (SIGINT)",
    143: "interrupted (SIGTERM)",
}


def _num(value: Any, default: float = 0.0) -> float:
    return (
        float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default
    )


def _cost(value: Any) -> float | None:
    """A run's cost in USD, or None when it is no amount (not a number, negative, NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    cost = float(value)
    return cost if math.isfinite(cost) and cost >= 0 else None


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


def exit_status(exit_code: int | None, *, answered: bool = False) -> str:
    """How a run ended, for a person: ``exit code 3, crashed``, ``killed by signal 9, SIGKILL``.

    asyncio reports a death by signal as a negative exit code; without an envelope an exit
    code 0 still produced no answer, so it is not called "answer produced".
    """
    if exit_code is None:
        return "exit status unknown"
    if exit_code < 0:
        try:
            name = signal.Signals(-exit_code).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-exit_code}, {name}"
    if exit_code == 0 and not answered:
        return "exit code 0 without an answer"
    return f"exit code {exit_code}, {EXIT_MEANINGS.get(exit_code, 'crashed')}"


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def mend_text(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings replaced by U+FFFD.

    JSON may carry half a surrogate pair (a JavaScript runner cutting its answer between an
    emoji's halves prints ``"\\ud83d"``); Python keeps it in a str no UTF-8 encoder takes, so
    each surface, the store and the log would fail on it in their own way. Mended here, once.
    """
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [mend_text(v) for v in value]
    if isinstance(value, dict):
        return {mend_text(k): mend_text(v) for k, v in value.items()}
    return value


def _list(value: Any) -> list[Any]:
    """A field the contract says is a list; anything else (a number, an object) is none."""
    return value if isinstance(value, list) else []


def parse_envelope(
    line: str | None,
    *,
    exit_code: int | None,
    stderr_tail: list[str],
    duration_ms: int,
    garbage: bool = False,
) -> RunResult:
    """Build the RunResult from the envelope line (or its absence)."""
    base: dict[str, Any] = {
        "exit_code": exit_code,
        "stderr_tail": stderr_tail,
        "duration_ms": duration_ms,
    }
    if line is None:
        what = "printed something that is not an envelope" if garbage else "printed no envelope"
        reason = f"the runner {what} ({exit_status(exit_code)})"
        return RunResult(ok=False, code="no_envelope", error=reason, **base)
    try:
        env = json.loads(line)
        if "\\u" in line:  # only an escape can make a lone surrogate (the line is UTF-8)
            env = mend_text(env)
        if not isinstance(env, dict) or not isinstance(env.get("ok"), bool):
            raise ValueError("no boolean 'ok'")
    except ValueError as exc:
        return RunResult(
            ok=False,
            code="bad_envelope",
            error=f"the runner's envelope is not valid ({exc}; {exit_status(exit_code)})",
            **base,
        )
    raw_usage = env.get("tokenUsage")
    usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    tool_calls = [c for c in _list(env.get("toolCalls")) if isinstance(c, dict)]
    artifacts = [a for a in _list(env.get("artifacts")) if isinstance(a, dict)]
    cost = _cost(env.get("costUSD"))
    flags = {
        k: env[k]
        for k in (
            "finishReason",
            "truncated",
            "iterationLimited",
            "toolsDisabled",
            "costCapped",
            "tokenCapped",
            "durationCapped",
        )
        if k in env
    }
    common: dict[str, Any] = {
        # known only as a finite amount >= 0: a string, a missing or a negative cost (which
        # would lower the day's spend below a cap) is a run nobody can price
        "cost_usd": cost or 0.0,
        "cost_known": env.get("costKnown") is True and cost is not None,
        "prompt_tokens": _int(usage.get("promptTokens")),
        "completion_tokens": _int(usage.get("completionTokens")),
        "total_tokens": _int(usage.get("totalTokens")),
        "tool_calls": tool_calls,
        "artifacts": artifacts,
        "flags": flags,
        "signal": env.get("signal") if isinstance(env.get("signal"), str) else None,
        **base,
    }
    if env["ok"]:
        answer = env.get("answer")
        if not isinstance(answer, str) or not answer.strip():
            return RunResult(
                ok=False, code="empty_response", error="the agent gave an empty answer", **common
            )
        return RunResult(ok=True, answer=answer, **common)
    code = env.get("code") if isinstance(env.get("code"), str) else "failed"
    error = env.get("error") if isinstance(env.get("error"), str) else None
    return RunResult(ok=False, code=code, error=error or code, **common)
