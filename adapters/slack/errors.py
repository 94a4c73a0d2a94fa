"""What a failed Slack Web API call means for the core: Slack's error codes and transport
failures mapped to :class:`~bridge.ports.DeliveryError` (passing, for good, rate limited
with its ``Retry-After``, or :class:`~bridge.ports.ChatGone`), and whether the call may
have been carried out all the same (so a resend could duplicate).

Apart from the surface because posts, edits, uploads, searches and file look-ups all read
their failures the same way.
"""

from __future__ import annotations

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError

from bridge.ports import ChatGone, DeliveryError

# what a Web API call through slack_sdk raises when it fails: Slack's refusal, or transport
CALL_ERRORS = (SlackClientError, aiohttp.ClientError, OSError, TimeoutError)
# Slack's refusals (HTTP 200, ok: false) that may pass if tried again; every other code is
# a refusal for good (channel_not_found, restricted_action_read_only_channel, token_expired,
# cannot_reply_to_message, ...): retried, a reply would hold its thread's later replies for
# the deliverer's whole patience (an hour) for nothing
# the channel takes no more of the bot's posts: archived, deleted, or the bot removed from it
GONE_ERRORS = frozenset({"channel_not_found", "is_archived", "not_in_channel"})
TRANSIENT_ERRORS = frozenset(
    {
        "internal_error",
        "fatal_error",
        "service_unavailable",
        "request_timeout",
        "ratelimited",
        "accesslimited",
    }
)
# of those, the ones after which the call may have been carried out all the same (Slack:
# "some aspect of the operation succeeded"): looked for before it is made again
MAYBE_DONE_ERRORS = frozenset({"internal_error", "fatal_error"})


def retry_after_of(exc: Exception) -> float | None:
    """Seconds Slack asked to wait (a 429), else None."""
    if not isinstance(exc, SlackApiError) or exc.response is None:
        return None
    response = exc.response
    if getattr(response, "status_code", 0) != 429 and response.get("error") != "ratelimited":
        return None
    headers = getattr(response, "headers", {}) or {}
    raw = headers.get("Retry-After") or headers.get("retry-after") or "1"
    if isinstance(raw, list):  # slack_sdk keeps aiohttp's multi-valued headers as lists
        raw = raw[0] if raw else "1"
    try:
        return max(float(raw), 1.0)
    except ValueError:
        return 1.0


def slack_error(exc: Exception, what: str) -> DeliveryError:
    """Map a slack_sdk / transport error to the core's :class:`DeliveryError`."""
    if isinstance(exc, SlackApiError):
        response = exc.response
        code = str(response.get("error") or "") if response is not None else ""
        status = getattr(response, "status_code", 0)
        retry_after = retry_after_of(exc)
        if retry_after is not None:
            return DeliveryError(f"{what}: rate limited", retry_after=retry_after)
        if code in GONE_ERRORS:
            return ChatGone(f"{what}: {code}")
        return DeliveryError(
            f"{what}: {code or f'HTTP {status}'}",
            # a 5xx (or a transient code) may pass; a 4xx, or any other code, will not
            permanent=status < 500 and code not in TRANSIENT_ERRORS,
        )
    return DeliveryError(f"{what}: {type(exc).__name__}: {exc}")


def unclear(exc: Exception) -> bool:
    """Did the request maybe reach Slack and post anyway (so a resend could duplicate)? A
    5xx, no answer, or Slack's own word for it: ``internal_error`` and ``fatal_error``
    (HTTP 200) say "some aspect of the operation" may have succeeded."""
    if isinstance(exc, SlackApiError):
        code = str(exc.response.get("error") or "") if exc.response is not None else ""
        return getattr(exc.response, "status_code", 0) >= 500 or code in MAYBE_DONE_ERRORS
    return True
