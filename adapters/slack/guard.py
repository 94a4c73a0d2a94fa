"""Checks on a Slack request before bolt reads it: authenticity first, then its shape.

bolt parses the body and walks fields (``event.type``, ``authorizations[0]``, ``actions[0]``,
``user.id`` ...) assuming Slack's types; a signed body with a list where Slack sends an
object, a number where it sends a string, bad UTF-8 or JSON nested a thousand deep made
it raise, and the gateway answered 500. Slack itself never sends such a body, so one that
is signed but malformed is answered 400 here and never reaches bolt or the core.

The signature is checked over the raw bytes (what Slack signs), in constant time, with
Slack's 5-minute window, before anything of the body is parsed.

The body is parsed here, not with bolt's ``parse_body``: that takes any form body merely
*containing* the text "payload" (a ``/jazz`` typed in ``#payload-team``, or with the word
in its text) for an interactivity payload, finds no ``payload`` field and returns ``{}``,
so the command matched nothing and Slack got a 404. bolt is handed the parsed body as JSON
(:func:`bolt_text`), which it reads back as it is.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any
from urllib.parse import parse_qsl

from bridge.payload import scan, surely_fine

SIGNATURE_WINDOW_S = 60 * 5
MAX_DEPTH = 64  # Slack's deepest payloads (rich text in blocks) stay far below this

# fields Slack always sends as strings (or null, which bolt takes as absent)
STRINGS = frozenset(
    {
        "type",
        "subtype",
        "ts",
        "thread_ts",
        "event_ts",
        "message_ts",
        "action_ts",
        "channel_type",
        "text",
        "bot_id",
        "team_id",
        "user_id",
        "channel_id",
        "enterprise_id",
        "event_id",
        "api_app_id",
        "token",
        "challenge",
        "trigger_id",
        "response_url",
        "callback_id",
        "action_id",
        "block_id",
        "value",
        "command",
        "user_team",
        "channel_name",
    }
)
# a string id, or an object whose "id" bolt reads
IDS = frozenset({"user", "channel", "team", "enterprise"})
# fields of an action (a pressed button, a picked option) that Slack sends as a text
# object ({"type": "plain_text", "text": ...}): the button's label in ``actions[i].text``
ACTION_TEXT_OBJECTS = frozenset({"text"})
# objects bolt or the adapter look into (their own fields are checked the same way)
OBJECTS = frozenset(
    {"event", "container", "message", "previous_message", "item", "assistant_thread", "view"}
)
# lists of objects bolt or the adapter index into (each object checked the same way)
OBJECT_LISTS = frozenset({"authorizations", "actions", "response_urls", "files"})
# lists nothing reads field by field; only their type is checked
LISTS = frozenset({"blocks", "attachments"})


MAX_TS_DIGITS = 12  # a timestamp longer than this is no Slack timestamp


def header_failure(timestamp: str | None, signature: str | None) -> str | None:
    """What the signature headers alone say is wrong (``missing``, ``stale``), or None:
    checked before the body is read, so an unsigned request is never buffered."""
    if not timestamp or not signature:
        return "missing"
    # Slack sends seconds since the epoch: ten ASCII digits. int() would take a 400-digit
    # number (whose distance from now overflows a float) or non-ASCII digits.
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= MAX_TS_DIGITS):
        return "missing"
    if abs(time.time() - int(timestamp)) > SIGNATURE_WINDOW_S:
        return "stale"
    return None


def signature_failure(
    raw: bytes, timestamp: str | None, signature: str | None, secret: str
) -> str | None:
    """Why the request is not signed by Slack (``missing``, ``stale``, ``signature``), or None."""
    failure = header_failure(timestamp, signature)
    if failure is not None or timestamp is None or signature is None:
        return failure or "missing"
    base = b"v0:" + timestamp.encode("ascii", "replace") + b":" + raw
    expected = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), signature.encode("utf-8", "replace")):
        return "signature"
    return None


def parse(raw: bytes, content_type: str | None) -> tuple[dict[str, Any] | None, str]:
    """The body as bolt will read it, or None and why it cannot be a Slack request."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "body is not UTF-8"
    as_json = _is_json(text, content_type)
    try:
        body = _parse_text(text, as_json)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        return None, "body is not valid JSON"
    if not isinstance(body, dict):
        return None, f"body is a JSON {type(body).__name__}, not an object"
    if not (as_json and surely_fine(text, MAX_DEPTH)):  # most events: no walk needed
        deepest, broken = scan(body)
        if deepest > MAX_DEPTH:
            return None, f"body is nested deeper than {MAX_DEPTH} levels"
        if broken:
            return None, "a string in the body is not valid unicode (a lone surrogate)"
    problem = _check(body, "")
    return (None, problem) if problem else (body, "")


def bolt_text(raw: bytes, content_type: str | None, body: dict[str, Any]) -> str:
    """The text to hand bolt for ``body`` (what :func:`parse` made of ``raw``), which bolt's
    ``parse_body`` reads back as ``body`` exactly: a JSON body as it came (the bytes just
    checked, never re-decoded with a charset it names), a form body (a slash command, a
    button press's ``payload=``) as JSON, which bolt takes as JSON by its leading ``{``
    whatever the Content-Type says."""
    text = raw.decode("utf-8")
    return text if _is_json(text, content_type) else json.dumps(body)


def _is_json(text: str, content_type: str | None) -> bool:
    """JSON (events, url_verification) or a form (slash commands, interactivity), as Slack
    and bolt tell them apart."""
    return content_type == "application/json" or text.startswith("{")


def _parse_text(text: str, as_json: bool) -> Any:
    """A JSON body, or a form whose ``payload`` field (interactivity), when it has one, is
    the JSON body; a form without one (a slash command) is its fields."""
    if as_json:
        return json.loads(text)
    if not text:
        return {}
    fields = dict(parse_qsl(text, keep_blank_values=True))
    if "payload" in fields:
        return json.loads(fields["payload"])
    return fields


def _check(obj: dict[str, Any], where: str) -> str | None:
    """The first field of ``obj`` (recursively, bounded by MAX_DEPTH) Slack never sends so."""
    in_action = where.startswith("actions[") and "." not in where
    for key, value in obj.items():
        path = f"{where}.{key}" if where else key
        if value is None and (key in STRINGS or key in IDS):  # Slack's null ids and strings
            continue
        if in_action and key in ACTION_TEXT_OBJECTS and isinstance(value, dict):
            continue  # nothing reads it
        if key in LISTS and isinstance(value, list):
            continue
        if key in STRINGS and not isinstance(value, str):
            return f"{path} is a {type(value).__name__}, not a string"
        if key in LISTS:
            return f"{path} is a {type(value).__name__}, not a list"
        if key in IDS and not isinstance(value, (str, dict)):
            return f"{path} is a {type(value).__name__}, not an id or an object"
        if key in OBJECTS and not isinstance(value, dict):
            return f"{path} is a {type(value).__name__}, not an object"
        if key in OBJECT_LISTS:
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                return f"{path} is not a list of objects"
            for i, item in enumerate(value):
                problem = _check(item, f"{path}[{i}]")
                if problem:
                    return problem
        elif (key in OBJECTS or key in IDS) and isinstance(value, dict):
            problem = _check(value, path)
            if problem:
                return problem
    if obj.get("type") in ("block_actions", "interactive_message") and not where:
        actions = obj.get("actions")
        if not actions:  # bolt takes actions[0]
            return f"a {obj['type']} payload without actions"
        if not all(isinstance(a.get("action_id"), str) for a in actions):
            return "a block action without an action_id"  # bolt's matcher indexes it
    return None
