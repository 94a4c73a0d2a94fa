"""A person's answer to a daemon run's prompt: the request it becomes, and its delivery.

The engine answers with the CLI's frames (``approval_decision``, ``user_input_response``,
``user_secret_response``); the daemon takes ``POST /runs/:id/answer`` with its own body,
the operator token for what approves or answers (RUNNER-CONTRACT.md, "The daemon").
Delivery retries what may pass a moment later and says, without the daemon's body (it
could echo a secret back), why an answer did not land. Kept apart from the handle
(:mod:`.daemon_handle`), which decides what a refused answer does to the run.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..config import RunnerSettings
from .daemon_client import (
    MAX_BACKOFF_S,
    NETWORK_ERRORS,
    DaemonClient,
    DaemonProtocolError,
    describe,
)

log = logging.getLogger(__name__)

ANSWER_ATTEMPTS = 3  # tries to deliver one answer when the daemon fails transiently
ANSWER_BACKOFF_S = 0.25  # the pause before the first retry; doubled for each next one
TRANSIENT_STATUSES = frozenset({429})  # and every 5xx: worth another try
# the item is not pending: on a retry, the earlier attempt landed; on a first try, it was
# settled on the daemon (in Jazz's own UI) while the person was deciding. Either way the run
# is not parked on it, so nothing is refused and the run goes on.
ANSWERED_ALREADY = 409


def answer_request(frame: dict[str, Any]) -> tuple[Any, dict[str, Any], bool] | None:
    """``(prompt id, body, whether it needs the operator token)`` for an answer frame;
    ``None`` for a frame of an unknown type."""
    kind = frame.get("type")
    operator = False
    ident: Any
    body: dict[str, Any]
    if kind == "approval_decision":
        ident = frame.get("toolCallId")
        if frame.get("approved") is True:
            body = {"toolCallId": ident, "approved": True}
            operator = True
        else:
            body = {"toolCallId": ident, "approved": False, "note": "rejected in chat"}
    elif kind == "user_input_response":
        ident = frame.get("requestId")
        response = frame.get("response")
        body = {"requestId": ident, "response": response if isinstance(response, str) else ""}
        operator = True
    elif kind == "user_secret_response":
        ident = frame.get("requestId")
        value = frame.get("value")
        if isinstance(frame.get("unavailable"), str):
            note = f"unavailable: {frame['unavailable']}"
            body = {"requestId": ident, "approved": False, "note": note}
        elif isinstance(value, str) and frame.get("declined") is not True:
            body = {"requestId": ident, "secret": value}
            operator = True
        else:
            body = {"requestId": ident, "approved": False, "note": "declined"}
    else:
        return None
    return ident, body, operator


async def deliver(
    client: DaemonClient,
    path: str,
    body: dict[str, Any],
    *,
    operator: bool,
    run_id: str,
    done: asyncio.Event,
) -> str | None:
    """POST one answer, retrying transient failures; ``None`` once delivered, else why not.

    A 5xx, a 429 or a network failure is tried again (``ANSWER_ATTEMPTS`` in all, with a
    doubling pause) unless the run is ``done`` meanwhile; a 409 (nothing of that id
    pending) is no refusal; any other is final. The reason never carries the daemon's
    body: a daemon could echo the answer (a secret) back.
    """
    delay = ANSWER_BACKOFF_S
    problem = ""
    for attempt in range(1, ANSWER_ATTEMPTS + 1):
        if attempt > 1:
            if done.is_set():
                break
            log.warning(
                "daemon run %s: answer not delivered (%s); try %d of %d in %.2fs",
                run_id,
                problem,
                attempt,
                ANSWER_ATTEMPTS,
                delay,
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF_S)
        try:
            status, _ = await client.request("POST", f"{path}/answer", body=body, operator=operator)
        except NETWORK_ERRORS as exc:
            problem = f"could not reach the Jazz daemon at {client.url} ({describe(exc)})"
            continue
        except DaemonProtocolError as exc:
            problem = f"the Jazz daemon sent an unusable reply ({exc})"
            continue
        if status < 300:
            return None
        if status == ANSWERED_ALREADY:
            if attempt == 1:
                log.info(
                    "daemon run %s: the answer came after the daemon settled its item "
                    "(HTTP %d); the run goes on",
                    run_id,
                    status,
                )
            return None
        problem = (
            f"the Jazz daemon refused the answer (HTTP {status})"
            f"{_hint(client.settings, status, operator)}"
        )
        if status < 500 and status not in TRANSIENT_STATUSES:
            return problem
    return f"{problem}; gave up after {ANSWER_ATTEMPTS} tries"


def _hint(settings: RunnerSettings, status: int, operator: bool) -> str:
    """What to check when the daemon refuses an answer for its credentials."""
    if status == 401 or (status == 403 and not operator):
        return "; check runner.daemon_token"
    if status != 403:
        return ""
    if settings.daemon_operator_token is None:
        return (
            "; approving or answering needs the daemon's operator token: set "
            "runner.daemon_operator_token (JAZZ_BRIDGE_RUNNER__DAEMON_OPERATOR_TOKEN)"
        )
    return "; check runner.daemon_operator_token"
