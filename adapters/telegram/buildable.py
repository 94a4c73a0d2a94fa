"""An update python-telegram-bot could not build is still refused, without building the rest.

Why: the adapter reads updates as JSON (:mod:`.update_json`), but it used to build each one
with PTB first, and PTB refuses some that :mod:`.guard` lets by: a field it requires (a
poll's ``persistent_id`` since Bot API 9.6, a photo's ``width``), a date or duration out of
Python's range, an object where it reads another. Such an update was passed by as
unreadable when polled, answered 400 when posted, and still is.

:func:`read` decides without PTB for what real traffic holds: an update made only of the
fields in :data:`UPDATE` below, each of a type PTB is known to take (closed: a field not
listed, or a ``null``, is not vouched for), with every field PTB requires. That check is
sound, not complete: an update it does not vouch for is built by PTB once, off the hot
path, and then read as PTB writes it back (``to_dict()``), so that what the adapter reads is
what PTB read. Whether PTB takes everything :data:`UPDATE` vouches for is tested against
PTB itself (tests/adapters/telegram/test_telegram_update_json.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from telegram import Bot
from telegram import Update as PtbUpdate

from .update_json import Update


class Unreadable(ValueError):
    """PTB cannot build the update; the message is PTB's own."""


@dataclass(frozen=True)
class Leaf:
    """A JSON value PTB takes as it is (or converts without fail)."""

    name: str
    takes: Callable[[Any], bool]


@dataclass(frozen=True)
class Kind:
    """A JSON object: its fields vouched for, and those PTB requires."""

    fields: dict[str, Spec]
    required: frozenset[str]


@dataclass(frozen=True)
class Many:
    """A JSON list (PTB makes it a tuple)."""

    item: Spec


Spec = Leaf | Kind | Many


def _kind(required: dict[str, Spec], optional: dict[str, Spec] | None = None) -> Kind:
    return Kind({**required, **(optional or {})}, frozenset(required))


STR = Leaf("str", lambda v: type(v) is str)
INT = Leaf("int", lambda v: type(v) is int)
BOOL = Leaf("bool", lambda v: type(v) is bool)
NUMBER = Leaf("number", lambda v: type(v) is int or type(v) is float)
# from_timestamp / timedelta(seconds=) take far more; these bounds are only what is vouched for
TIMESTAMP = Leaf("timestamp", lambda v: type(v) is int and 0 <= v < 2**33)
SECONDS = Leaf("seconds", lambda v: type(v) is int and 0 <= v < 2**31)

USER = _kind(
    {"id": INT, "is_bot": BOOL, "first_name": STR},
    {"last_name": STR, "username": STR, "language_code": STR, "is_premium": BOOL},
)
CHAT = _kind(
    {"id": INT, "type": STR},
    {"title": STR, "username": STR, "first_name": STR, "last_name": STR, "is_forum": BOOL},
)
ENTITY = _kind(
    {"type": STR, "offset": INT, "length": INT},
    {"url": STR, "user": USER, "language": STR, "custom_emoji_id": STR},
)
FILE: dict[str, Spec] = {"file_id": STR, "file_unique_id": STR}
PHOTO = _kind({**FILE, "width": INT, "height": INT}, {"file_size": INT})
ABOUT: dict[str, Spec] = {"file_size": INT, "file_name": STR, "mime_type": STR}
DOCUMENT = _kind(FILE, {**ABOUT, "thumbnail": PHOTO})
VOICE = _kind({**FILE, "duration": SECONDS}, {"file_size": INT, "mime_type": STR})
AUDIO = _kind(
    {**FILE, "duration": SECONDS}, {**ABOUT, "performer": STR, "title": STR, "thumbnail": PHOTO}
)
VIDEO = _kind(
    {**FILE, "width": INT, "height": INT, "duration": SECONDS}, {**ABOUT, "thumbnail": PHOTO}
)
VIDEO_NOTE = _kind(
    {**FILE, "length": INT, "duration": SECONDS}, {"file_size": INT, "thumbnail": PHOTO}
)
LOCATION = _kind({"latitude": NUMBER, "longitude": NUMBER}, {"horizontal_accuracy": NUMBER})
QUOTE = _kind({"text": STR, "position": INT}, {"entities": Many(ENTITY), "is_manual": BOOL})
TOPIC_CREATED = _kind({"name": STR, "icon_color": INT}, {"icon_custom_emoji_id": STR})
BUTTON = _kind({"text": STR}, {"callback_data": STR, "url": STR})
KEYBOARD = _kind({"inline_keyboard": Many(Many(BUTTON))})
MESSAGE = _kind(
    {"message_id": INT, "date": TIMESTAMP, "chat": CHAT},
    {
        "from": USER,
        "sender_chat": CHAT,
        "is_automatic_forward": BOOL,
        "text": STR,
        "caption": STR,
        "entities": Many(ENTITY),
        "caption_entities": Many(ENTITY),
        "message_thread_id": INT,
        "is_topic_message": BOOL,
        "quote": QUOTE,
        "forum_topic_created": TOPIC_CREATED,
        "edit_date": TIMESTAMP,
        "media_group_id": STR,
        "document": DOCUMENT,
        "photo": Many(PHOTO),
        "voice": VOICE,
        "audio": AUDIO,
        "video": VIDEO,
        "video_note": VIDEO_NOTE,
        "location": LOCATION,
        "migrate_to_chat_id": INT,
        "migrate_from_chat_id": INT,
        "reply_markup": KEYBOARD,
        "has_protected_content": BOOL,
        "author_signature": STR,
    },
)
MESSAGE.fields["reply_to_message"] = MESSAGE  # bounded by guard.MAX_DEPTH
CALLBACK = _kind(
    {"id": STR, "from": USER, "chat_instance": STR},
    {"message": MESSAGE, "data": STR, "inline_message_id": STR},
)
UPDATE = _kind(
    {"update_id": INT},
    {
        "message": MESSAGE,
        "edited_message": MESSAGE,
        "channel_post": MESSAGE,
        "edited_channel_post": MESSAGE,
        "callback_query": CALLBACK,
    },
)


def vouched(value: Any, spec: Spec = UPDATE) -> bool:
    """Whether ``value`` holds only what ``spec`` vouches PTB builds (see the docstring)."""
    if isinstance(spec, Kind):
        if type(value) is not dict:
            return False
        fields = spec.fields
        for key, item in value.items():
            sub = fields.get(key)
            if sub is None or item is None or not vouched(item, sub):
                return False
        return spec.required <= value.keys()
    if isinstance(spec, Many):
        return type(value) is list and all(vouched(item, spec.item) for item in value)
    return spec.takes(value)


def read(data: dict[str, Any], bot: Bot | None) -> Update:
    """``data`` (passed by :func:`.guard.problem`) as the adapter reads it: itself when
    vouched for, else as PTB builds and writes it back; :class:`Unreadable` when PTB cannot
    build it."""
    if vouched(data):
        return cast(Update, data)
    try:
        built = PtbUpdate.de_json(data, bot)
    except Exception as exc:  # whatever PTB raises is the input's
        raise Unreadable(str(exc)) from exc
    return cast(Update, built.to_dict())
