"""What the daemon's run objects say: their state, their events and prompts, their result.

``GET /runs/:id`` answers with a run object (RUNNER-CONTRACT.md, "The daemon"), read
leniently here: the states several daemon versions use, prompts listed under
``pending`` in several shapes, the envelope under ``envelope`` or ``result``.
:class:`RunProgress` turns the objects one run's polls return into the CLI's events,
each once, so the engine cannot tell the two backends apart. Kept apart from the handle
(:mod:`.daemon_handle`), which decides when to poll, cancel and give up.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from typing import Any

from .base import PROMPT_EVENTS, RunnerEvent, RunResult
from .envelope import parse_envelope

log = logging.getLogger(__name__)

WAITING_STATES = frozenset({"input-required"})
ACTIVE_STATES = frozenset(
    {"queued", "pending", "starting", "running", "working", "input-required", "paused"}
)
SUCCESS_STATES = frozenset({"completed", "complete", "succeeded", "success", "done", "finished"})
FAILED_STATES = frozenset({"failed", "error", "errored"})
CANCELLED_STATES = frozenset({"cancelled", "canceled", "interrupted", "stopped", "aborted"})
FINISHED_STATES = SUCCESS_STATES | FAILED_STATES | CANCELLED_STATES

# pending item kind -> (event type, id key, other keys the CLI's event carries)
PROMPT_KINDS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "approval": ("approval_required", "toolCallId", ("toolName", "message", "preview")),
    "input": (
        "user_input_required",
        "requestId",
        ("question", "suggestions", "allowCustom"),
    ),
    "secret": ("user_secret_required", "requestId", ("name", "message")),
}
KIND_ALIASES = {
    "approval": "approval",
    "approval_required": "approval",
    "tool_approval": "approval",
    "question": "input",
    "input": "input",
    "user_input": "input",
    "user_input_required": "input",
    "secret": "secret",
    "user_secret": "secret",
    "user_secret_required": "secret",
}


class RunProgress:
    """What one run's polled objects have said so far: events forwarded, prompts shown.

    Each new event and each prompt goes to ``events`` once; ``pending`` holds the prompts
    shown and not answered, ``tail`` the errors for a failure reply.
    """

    def __init__(
        self, run_id: str, events: asyncio.Queue[RunnerEvent | None], tail: deque[str]
    ) -> None:
        self.run_id = run_id
        self.events = events
        self.tail = tail
        self._seen = 0  # how many of the run's events were forwarded
        self._surfaced: set[str] = set()  # prompt ids already emitted
        self.pending: set[str] = set()  # prompt ids emitted and not answered
        self._listed: set[str] = set()  # prompt ids the daemon's run has listed as pending
        self._unshown: set[str] = set()  # pending items no prompt is made of (logged once)

    def apply(self, run: dict[str, Any]) -> bool:
        """Forward new events, surface new prompts; whether the run now waits on a person
        (its clock is paused then)."""
        events = run.get("events")
        if isinstance(events, list):
            for raw in events[self._seen :]:
                self._seen += 1
                if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
                    continue
                event = RunnerEvent(type=raw["type"], data=dict(raw))
                if event.type in PROMPT_EVENTS:
                    ident = event.data.get("toolCallId") or event.data.get("requestId")
                    if isinstance(ident, str):
                        if ident in self._surfaced:
                            continue
                        self._surfaced.add(ident)
                        self.pending.add(ident)
                elif event.type == "error":
                    message = event.data.get("message") or event.data.get("error")
                    if isinstance(message, str):
                        self.tail.append(message[:500])
                self.events.put_nowait(event)
        if not finished(run):
            waiting_on: set[str] = set()  # the shown prompts the daemon still lists
            for item in pending_items(run.get("pending")):
                prompt = prompt_event(item)
                if prompt is None:
                    self._note_unshown(item)
                    continue
                ident = prompt.data.get("toolCallId") or prompt.data.get("requestId")
                if not isinstance(ident, str):
                    continue
                waiting_on.add(ident)
                if ident in self._surfaced:
                    continue
                self._surfaced.add(ident)
                self.pending.add(ident)
                self.events.put_nowait(prompt)
            if "pending" in run:
                # A prompt the daemon listed and lists no more was settled there (in Jazz's
                # own UI, by its own rules): it no longer holds the clock. One it never
                # listed (seen in the events first, or listed in a shape not read here)
                # keeps it: a person is still being asked.
                self._listed |= waiting_on
                self.pending -= self._listed - waiting_on
        # Only a prompt a person was shown stops the clock: a run parked on an item nobody
        # is asked (a file request) would otherwise wait, unanswerable, for ever.
        return run.get("state") in WAITING_STATES and bool(self.pending)

    def _note_unshown(self, item: dict[str, Any]) -> None:
        """Say once per item that the run waits on something no person is asked."""
        kind = item.get("kind") or item.get("type")
        key = f"{kind}:{item.get('requestId') or item.get('toolCallId') or item.get('id')}"
        if key in self._unshown:
            return
        self._unshown.add(key)
        note = (
            f"the Jazz daemon waits on a {kind!s} request the gateway cannot show; "
            "its timeout still runs"
        )
        log.warning("daemon run %s: %s", self.run_id, note)
        self.tail.append(note[:500])


def failure(code: str, error: str, tail: deque[str], duration_ms: int) -> RunResult:
    """A failed run's result, its reason added to ``tail`` first."""
    tail.append(error[:500])
    return RunResult(
        ok=False,
        code=code,
        error=error,
        duration_ms=duration_ms,
        stderr_tail=list(tail),
    )


def result_of(run: dict[str, Any], tail: deque[str], duration_ms: int) -> RunResult:
    """The result a finished run object holds: its envelope, else a failure saying why."""
    state = run.get("state")
    error = run.get("error")
    if isinstance(error, dict):
        error = error.get("message")
    if isinstance(error, str) and error.strip():
        tail.append(error.strip()[:500])
    else:
        error = None
    envelope = run.get("envelope")
    if envelope is None:
        envelope = run.get("result")
    line: str | None = None
    if isinstance(envelope, dict):
        line = json.dumps(envelope)
    elif isinstance(envelope, str) and envelope.strip().startswith("{"):
        line = envelope.strip()
    if line is not None:
        return parse_envelope(
            line,
            exit_code=None,
            stderr_tail=list(tail),
            duration_ms=duration_ms,
        )
    if state in CANCELLED_STATES:
        why = error or "the run was cancelled on the daemon"
        return failure("interrupted", why, tail, duration_ms)
    if state in FAILED_STATES:
        why = error or "the Jazz daemon reported that the run failed, with no result"
        return failure("failed", why, tail, duration_ms)
    why = error or "the Jazz daemon reported the run finished without a result"
    return failure("no_envelope", why, tail, duration_ms)


def listed_runs(data: Any) -> list[dict[str, Any]]:
    """The runs in a ``GET /runs`` answer: a list, or an object holding one under "runs"."""
    if isinstance(data, dict):
        data = data.get("runs")
    return [run for run in data if isinstance(run, dict)] if isinstance(data, list) else []


def run_id_of(data: Any) -> str | None:
    """A run object's id (``id`` or ``runId``, a string or a number), if it has one."""
    if not isinstance(data, dict):
        return None
    for key in ("id", "runId"):
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
    return None


def finished(run: dict[str, Any]) -> bool:
    """Whether a run object says the run is over (a final state, or a result and no
    active state)."""
    state = run.get("state")
    if state in FINISHED_STATES:
        return True
    has_envelope = isinstance(run.get("envelope"), dict | str) or isinstance(
        run.get("result"), dict | str
    )
    return has_envelope and state not in ACTIVE_STATES


def pending_items(pending: Any) -> list[dict[str, Any]]:
    """A run object's ``pending``: one item, a list of them, or none."""
    if isinstance(pending, dict):
        return [pending]
    if isinstance(pending, list):
        return [p for p in pending if isinstance(p, dict)]
    return []


def prompt_event(item: dict[str, Any]) -> RunnerEvent | None:
    """The CLI-shaped prompt event for one pending item of the daemon's run object."""
    raw_kind = item.get("kind") or item.get("type")
    kind = KIND_ALIASES.get(raw_kind.lower()) if isinstance(raw_kind, str) else None
    if kind is None:
        if "toolCallId" in item:
            kind = "approval"
        elif "question" in item:
            kind = "input"
        elif "name" in item and "requestId" in item:
            kind = "secret"
        else:
            return None
    event_type, id_key, keys = PROMPT_KINDS[kind]
    ident = item.get(id_key) or item.get("id")
    if isinstance(ident, int) and not isinstance(ident, bool):
        ident = str(ident)
    if not isinstance(ident, str) or not ident:
        return None
    data: dict[str, Any] = {"type": event_type, id_key: ident}
    if kind == "approval" and "toolName" not in item and isinstance(item.get("tool"), str):
        data["toolName"] = item["tool"]
    for key in keys:
        if key in item:
            data[key] = item[key]
    return RunnerEvent(type=event_type, data=data)
