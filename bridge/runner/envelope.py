"""Reading the runner's stdout envelope (docs/runner-contract.md): the last line starting ``{``.

A run that printed no envelope, garbage, or an envelope of the wrong shape becomes a
failure with the exit code and a short reason a person can act on, never silence.
"""

from __future__ import annotations

import json
import math
import mimetypes
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


# Model providers that run on the person's own machine and cost nothing: Jazz's local
# servers (src/core/constants/local-providers.ts: llamacpp, ollama) and LM Studio. Only
# for them is a ``costUSD`` of 0 a known price when the envelope has no ``costKnown``.
FREE_LOCAL_PROVIDERS = frozenset({"llamacpp", "ollama", "lmstudio"})


def _cost_known(env: dict[str, Any], cost: float | None, provider: str | None) -> bool:
    """Whether the run's cost is a price (see :func:`parse_envelope`)."""
    if cost is None:
        return False
    if "costKnown" in env:
        return env["costKnown"] is True
    if cost > 0:
        return True
    return is_free(provider)


def is_free(provider: str | None) -> bool:
    """Whether ``provider`` is a local one whose runs cost nothing."""
    return provider is not None and provider.strip().lower() in FREE_LOCAL_PROVIDERS


def _web_app_artifacts(value: Any, known: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The released CLI's ``webApp`` (a ``create_web_app`` result) as contract artifacts:
    its image (``imagePath``) and its page (``htmlPath``), each path once."""
    if not isinstance(value, dict):
        return []
    seen = {a.get("path") for a in known}
    found: list[dict[str, Any]] = []
    for key, kind in (("imagePath", "image"), ("htmlPath", "file")):
        path = value.get(key)
        if not isinstance(path, str) or not path or path in seen:
            continue
        seen.add(path)
        media = "text/html" if kind == "file" else mimetypes.guess_type(path)[0]
        found.append(
            {
                "kind": kind,
                "path": path,
                "mediaType": media,
                "tool": "create_web_app",
                "source": "rendered",
            }
        )
    return found


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


# stderr lines that tell a person nothing: a JavaScript stack frame ("at fn (file:1:2)"),
# a line of the source excerpt Bun prints above an error ("370 | ...") and its "^" marker,
# a blank or bracket-only line (the end of an object Bun prints: "},")
_STACK_FRAME = re.compile(r"at\s+\S.*(?::\d+(?::\d+)?\)?|\((?:native|<anonymous>)\))")
_SOURCE_LINE = re.compile(r"\d+\s*\|.*")
_NO_TEXT = re.compile(r"[\s\[\](){},;^~]*")
_ERROR_NAME = re.compile(r"[A-Za-z_$][\w$.]*:\s*")  # "AI_APICallError: ", "error: "


# a property of an error's dump that tells a person nothing (``cause: undefined,``,
# ``isRetryable: true,``, ``error: [Object ...],``, ``vercel.ai.error: true,``)
_DUMP_FLAG = re.compile(
    r"[\w.]+: (?:undefined|null|true|false|\[Object \.\.\.\]|\[Array \.\.\.\]),?"
)


def useful_stderr(tail: list[str], error: str | None, keep: int = 5) -> list[str]:
    """The last ``keep`` lines of a run's stderr tail worth showing a person with ``error``.

    The released CLI reports a provider failure with no ``error`` event, only a stack trace
    on stderr and a short ``error`` in its envelope (docs/runner-contract.md, recording 10): its
    frames, source excerpt lines, blank and bracket-only lines and the lines that only
    repeat ``error`` (``AI_APICallError: <the end of error>``) are left out.
    """
    said = (error or "").strip()

    def repeats(line: str) -> bool:
        if not said:
            return False
        text = line.rstrip(" ,;.")
        rest = _ERROR_NAME.sub("", text, count=1) if _ERROR_NAME.match(text) else text
        return said in (text, rest) or said.endswith(f": {rest}") or said.endswith(f": {text}")

    kept: list[str] = []
    depth = 0  # inside a nested object of an error's property dump (Bun's ``key: {``)
    for line in (raw.strip() for raw in tail):
        opens = line.endswith(("{", "["))
        closes = line.startswith(("}", "]"))
        if closes:
            depth = max(depth - 1, 0)
        if depth or opens or closes:
            depth += opens
            continue
        if (
            _NO_TEXT.fullmatch(line)
            or _STACK_FRAME.fullmatch(line)
            or _SOURCE_LINE.fullmatch(line)
            or _DUMP_FLAG.fullmatch(line)
            or repeats(line)
        ):
            continue
        kept.append(line)
    return kept[-keep:] if keep > 0 else []


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
    provider: str | None = None,
) -> RunResult:
    """Build the RunResult from the envelope line (or its absence).

    ``provider`` is the model provider the run used (``openai``, ``llamacpp``: the run's
    ``stream_start`` event), or None when it is not known.

    The cost is known (``cost_known``; ``limits.daily_cost_usd`` refuses new runs for the
    rest of the day after any run whose cost is not) only when ``costUSD`` is a finite
    number >= 0 and:

    * the envelope has ``costKnown`` (the documented CLI): it is ``true``;
    * it has none (the released CLI 0.14.2 never sends it): ``costUSD`` is more than 0, or
      it is 0 and ``provider`` is a local one that costs nothing
      (:data:`FREE_LOCAL_PROVIDERS`). A 0 from a paid or an unknown provider stays
      unknown: Jazz prints 0 when it has no price for the model.

    The released CLI's ``webApp`` (it has no ``artifacts``) becomes artifacts too: its
    ``imagePath`` an ``image``, its ``htmlPath`` a ``file`` of ``text/html``.
    """
    base: dict[str, Any] = {
        "exit_code": exit_code,
        "stderr_tail": stderr_tail,
        "duration_ms": duration_ms,
    }
    if line is None:
        what = "printed something that is not an envelope" if garbage else "printed no envelope"
        reason = f"the runner {what} ({exit_status(exit_code)})"
        # a run of a free local provider cost nothing, envelope or not: the released CLI
        # prints none when it is stopped, and an unpriced run would close the spend cap
        return RunResult(
            ok=False, code="no_envelope", error=reason, cost_known=is_free(provider), **base
        )
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
    artifacts += _web_app_artifacts(env.get("webApp"), artifacts)
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
        "cost_known": _cost_known(env, cost, provider),
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
    # the released CLI's failure has no code: a plain failure
    code = env.get("code") if isinstance(env.get("code"), str) else "failed"
    error = env.get("error") if isinstance(env.get("error"), str) else None
    return RunResult(ok=False, code=code, error=error or code, **common)
