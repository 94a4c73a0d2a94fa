"""The shape of an update (posted or polled), checked before anything reads it.

PTB's ``de_json`` trusts the Bot API's types: a string where Telegram sends an object made
it raise outside the errors the webhook caught (a 500), and a string chat id went through
it, was stored and failed later when the answer was sent. The adapter now reads the JSON
itself (:mod:`.update_json`), which trusts these types just as much. The Bot API never
sends such an update, so one that does not match the fields the adapter reads (their
types, Telegram's own) is answered 400 and never stored. Unknown fields are left alone (new
Bot API versions add them); what PTB would refuse beyond this is :mod:`.buildable`'s.
"""

from __future__ import annotations

from typing import Any

from bridge.payload import scan

MAX_DEPTH = 64  # real updates (a reply to a reply, entities, keyboards) stay far below

Spec = type | tuple[type, ...] | dict[str, Any] | list[Any]

USER: dict[str, Spec] = {"id": int, "is_bot": bool, "first_name": str, "username": str}
CHAT: dict[str, Spec] = {"id": int, "type": str, "username": str, "title": str, "is_forum": bool}
ENTITY: dict[str, Spec] = {"type": str, "offset": int, "length": int, "user": USER}
FILE: dict[str, Spec] = {
    "file_id": str,
    "file_unique_id": str,
    "file_size": int,
    "file_name": str,
    "mime_type": str,
}
PHOTO: dict[str, Spec] = {**FILE, "width": int, "height": int}
VIDEO: dict[str, Spec] = {**PHOTO, "duration": int}
NUMBER = (int, float)
LOCATION: dict[str, Spec] = {"latitude": NUMBER, "longitude": NUMBER}
VENUE: dict[str, Spec] = {"location": LOCATION, "title": str, "address": str}
CONTACT: dict[str, Spec] = {"phone_number": str, "first_name": str, "last_name": str}
POLL: dict[str, Spec] = {"question": str, "options": [{"text": str}]}
STICKER: dict[str, Spec] = {**PHOTO, "emoji": str}
DICE: dict[str, Spec] = {"emoji": str, "value": int}
QUOTE: dict[str, Spec] = {"text": str}  # the part of the replied-to message quoted
MESSAGE: dict[str, Spec] = {
    "message_id": int,
    "date": int,
    "chat": CHAT,
    "from": USER,
    "text": str,
    "caption": str,
    "message_thread_id": int,
    "is_topic_message": bool,
    "entities": [ENTITY],
    "caption_entities": [ENTITY],
    "document": FILE,
    "voice": FILE,
    "audio": FILE,
    "video": VIDEO,
    "media_group_id": str,
    "photo": [PHOTO],
    "quote": QUOTE,
    "video_note": FILE,
    "location": LOCATION,
    "venue": VENUE,
    "contact": CONTACT,
    "poll": POLL,
    "sticker": STICKER,
    "dice": DICE,
    "sender_chat": CHAT,
}
MESSAGE["reply_to_message"] = MESSAGE  # bounded by MAX_DEPTH
CALLBACK: dict[str, Spec] = {
    "id": str,
    "from": USER,
    "message": MESSAGE,
    "chat_instance": str,
    "data": str,
}
UPDATE: dict[str, Spec] = {
    "update_id": int,
    "message": MESSAGE,
    "edited_message": MESSAGE,
    "channel_post": MESSAGE,
    "edited_channel_post": MESSAGE,
    "callback_query": CALLBACK,
}
# fields an object of that kind cannot be without (keyed by the spec's identity)
REQUIRED: dict[int, frozenset[str]] = {
    id(UPDATE): frozenset({"update_id"}),
    id(MESSAGE): frozenset({"message_id", "chat"}),
    id(CHAT): frozenset({"id", "type"}),
    id(QUOTE): frozenset({"text"}),
    id(LOCATION): frozenset({"latitude", "longitude"}),
    id(VENUE): frozenset({"location", "title", "address"}),
    id(CONTACT): frozenset({"phone_number", "first_name"}),
    id(POLL): frozenset({"question", "options"}),
    id(DICE): frozenset({"emoji", "value"}),
    id(USER): frozenset({"id"}),
    id(CALLBACK): frozenset({"id", "from"}),
}


def problem(data: Any) -> str | None:
    """Why ``data`` is not a Bot API update, or None when it may be one."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    deepest, broken = scan(data)
    if deepest > MAX_DEPTH:
        return f"nested deeper than {MAX_DEPTH} levels"
    if broken:
        return "a string in it is not valid unicode (a lone surrogate)"
    return _check(data, UPDATE, "update")


def _check(value: Any, spec: Spec, path: str) -> str | None:
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return f"{path} is a {_name(value)}, not an object"
        required = REQUIRED.get(id(spec), frozenset())
        for key, sub in spec.items():
            if value.get(key) is None:  # null is taken as absent, as PTB does
                if key in required:
                    return f"{path}.{key} is missing"
                continue
            found = _check(value[key], sub, f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(spec, list):
        if not isinstance(value, list):
            return f"{path} is a {_name(value)}, not a list"
        for i, item in enumerate(value):
            found = _check(item, spec[0], f"{path}[{i}]")
            if found:
                return found
        return None
    # bool is an int in Python; Telegram never sends true for a number
    if not isinstance(value, spec) or (spec is int and isinstance(value, bool)):
        return f"{path} is a {_name(value)}, not {_name_of(spec)}"
    return None


def _name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _name_of(spec: Spec) -> str:
    return spec.__name__ if isinstance(spec, type) else "a valid value"
