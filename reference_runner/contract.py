"""The names of the ``jazz run`` contract this runner speaks, and how a run ends.

Why it exists: every other module needs the same few facts (which events belong to which
``--events`` category, which always come, the approval policies, which key names the
prompt an answer frame answers) and the same three ways out of a run; kept here, apart
from the code that emits or reads them, they are one list to check against
``docs/runner-contract.md``.
"""

from __future__ import annotations

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
ANSWER_KEYS = {
    "approval_decision": "toolCallId",
    "user_input_response": "requestId",
    "user_secret_response": "requestId",
}


class Finished(Exception):
    """Unwinds the run with an exit code once its envelope (or its absence) is settled."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class BadInput(Exception):
    """Bad flags or a bad first stdin line: a failure envelope, exit 1."""


class HomeError(Exception):
    """A path in the home this account cannot write: the message names it and why."""
