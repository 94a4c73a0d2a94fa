"""The prompts that wait for a person: approvals, questions and secrets.

Why it exists: the gateway's hardest paths are the ones where a run stops for a person
(several prompts pending at once, an answer after minutes, stdin closing, ``--park``, a
read-only policy, tools approved in advance). These directives ask the way the contract
asks (``approval_required``, ``user_input_required``, ``user_secret_required`` on stderr,
the answer frames on stdin), pause the timeout clock meanwhile, and report what came back
without ever echoing a secret.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, NoReturn

from .contract import Finished

if TYPE_CHECKING:
    from .run import Run

ANSWER_FRAME = {
    "approval_required": "approval_decision",
    "user_input_required": "user_input_response",
    "user_secret_required": "user_secret_response",
}


def park(run: Run, pending: list[dict[str, Any]]) -> NoReturn:
    """``--park``: end the run (exit 2) listing what it waits for, instead of waiting."""
    run.out.envelope(
        run.failure(
            "failed",
            "parked: waiting for a person",
            parked=True,
            status="input-required",
            pending=pending,
        )
    )
    raise Finished(2)


def ask_person(run: Run, events: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
    """Emit every prompt, then wait for each answer (None: unanswered); clock paused."""
    if run.args.park:
        park(run, events)
    if not run.args.interactive_stdin:
        return [None for _ in events]
    for event in events:
        run.clock.pause()
        run.out.event(event["type"], **{k: v for k, v in event.items() if k != "type"})
    answers: list[dict[str, Any] | None] = []
    for event in events:
        kind = ANSWER_FRAME[event["type"]]
        ident = event.get("toolCallId") or event["requestId"]
        try:
            answers.append(run.stdin.wait(kind, ident))
        finally:
            run.clock.resume()
    return answers


def approvals(run: Run, tools: list[str]) -> None:
    """Ask to approve each tool (all pending at once), unless auto-approved or read-only."""
    events: list[dict[str, Any]] = []
    asked: list[str] = []
    results: dict[str, bool] = {}
    for tool in tools:
        ident = run.next_id("approval")
        run.out.event("command_risk_classifying", toolCallId=ident, toolName=tool)
        run.out.event("command_risk_classified", toolCallId=ident, risk="low-risk")
        if tool in run.auto_approve:
            results[ident] = True
            run.out.event("approval_resolved", toolCallId=ident, approved=True, auto=True)
        elif run.args.approval_policy == "read-only":
            results[ident] = False  # above the tier: declined without asking
            run.out.event("approval_resolved", toolCallId=ident, approved=False, auto=True)
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
    answers = ask_person(run, events) if events else []
    for ident, got in zip(asked, answers, strict=True):
        approved = bool(got and got.get("approved") is True)
        results[ident] = approved
        run.out.event("approval_resolved", toolCallId=ident, approved=approved)
    for tool, ident in zip(tools, results, strict=True):
        verdict = "approved" if results[ident] else "declined"
        run.notes.append(f"{tool} was {verdict}")
        if results[ident]:
            arguments = json.dumps({"tool": tool})
            run.tool_calls.append({"id": ident, "name": tool, "arguments": arguments})


def do_approve(run: Run, rest: str) -> None:
    approvals(run, [rest or "bash"])


def do_approve2(run: Run, rest: str) -> None:
    approvals(run, [rest or "bash", "write"])


def do_ask(run: Run, rest: str) -> None:
    ident = run.next_id("question")
    (got,) = ask_person(
        run,
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
        ],
    )
    response = got.get("response") if got else None
    if isinstance(response, str) and response.strip():
        run.notes.append(f"you answered: {response}")
    else:
        run.notes.append("the question was declined")


def do_secret(run: Run, rest: str) -> None:
    ident = run.next_id("secret")
    name = rest or "a token"
    (got,) = ask_person(
        run,
        [
            {
                "type": "user_secret_required",
                "requestId": ident,
                "name": name,
                "message": f"The reference runner asks for {name} (it only counts it).",
            }
        ],
    )
    if got is None:
        why = "stdin closed" if run.args.interactive_stdin else "not interactive"
        run.notes.append(f"no secret is available here ({why})")
    elif isinstance(got.get("value"), str) and got["value"] and not got.get("declined"):
        run.notes.append(f"got a secret of {len(got['value'])} characters (not shown)")
    elif got.get("unavailable"):
        run.notes.append(f"no secret is available here ({got['unavailable']})")
    else:
        run.notes.append("the secret was declined")
