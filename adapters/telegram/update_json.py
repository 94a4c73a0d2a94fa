"""A Bot API update read as the JSON it came as, where python-telegram-bot's objects were.

Why: the intake's pure functions (:mod:`.inbound`: who is let in, what the agent reads,
which conversation) read a dozen fields of an update, and building the whole update into
PTB's object graph for them (``Update.de_json``, attribute by attribute through
``TelegramObject.__setattr__``) was ~8% of the gateway's busy time under
``bench/bench_telegram_load.py``. The update is checked as JSON before anything reads it
(:mod:`.guard` for the shapes the adapter reads, :mod:`.buildable` for what PTB would
refuse), so they read the dict itself, through these types.

The types are TypedDicts over ``json.loads``'s own dicts, so reading costs nothing more
than a dict lookup; they name the fields the adapter reads, typed as Telegram sends them.
A JSON ``null`` is read as absent, as PTB reads it: optional fields are read with ``.get``.
The few conveniences of PTB's the adapter used (a person's full name, a chat's name, the
text an entity covers) are here, written as PTB writes them, so nothing reads differently.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal, Required, TypedDict

from telegram import TelegramObject

JSON = dict[str, Any]  # one object of an update, as json.loads gave it


class User(TypedDict, total=False):
    id: Required[int]
    is_bot: bool
    first_name: str
    last_name: str
    username: str


class Chat(TypedDict, total=False):
    id: Required[int]
    type: Required[str]
    title: str
    username: str
    first_name: str
    last_name: str
    is_forum: bool


class Entity(TypedDict, total=False):
    type: Required[str]
    offset: Required[int]
    length: Required[int]
    user: User


class File(TypedDict, total=False):
    """A document, voice note, audio file, video or round video message."""

    file_id: Required[str]
    file_unique_id: Required[str]
    file_size: int
    file_name: str
    mime_type: str


class PhotoSize(File, total=False):
    width: Required[int]
    height: Required[int]


class Location(TypedDict):
    latitude: float
    longitude: float


class Venue(TypedDict):
    location: Location
    title: str
    address: str


class Contact(TypedDict, total=False):
    phone_number: Required[str]
    first_name: Required[str]
    last_name: str


class PollOption(TypedDict):
    text: str


class Poll(TypedDict):
    question: str
    options: list[PollOption]


class Sticker(TypedDict, total=False):
    emoji: str


class Dice(TypedDict):
    emoji: str
    value: int


class Quote(TypedDict):
    text: str


# "from" is a keyword: the functional form
Message = TypedDict(
    "Message",
    {
        "message_id": Required[int],
        "chat": Required[Chat],
        "from": User,
        "sender_chat": Chat,
        "is_automatic_forward": bool,
        "text": str,
        "caption": str,
        "entities": list[Entity],
        "caption_entities": list[Entity],
        "message_thread_id": int,
        "is_topic_message": bool,
        "reply_to_message": "Message",
        "quote": Quote,
        "forum_topic_created": JSON,
        "media_group_id": str,
        "document": File,
        "photo": list[PhotoSize],
        "voice": File,
        "audio": File,
        "video": File,
        "video_note": File,
        "venue": Venue,
        "location": Location,
        "contact": Contact,
        "poll": Poll,
        "sticker": Sticker,
        "dice": Dice,
        "migrate_to_chat_id": int,
        "migrate_from_chat_id": int,
    },
    total=False,
)

CallbackQuery = TypedDict(
    "CallbackQuery",
    {"id": Required[str], "from": Required[User], "message": Message, "data": str},
    total=False,
)


class Update(TypedDict, total=False):
    update_id: Required[int]
    message: Message
    edited_message: Message
    callback_query: CallbackQuery


def message_json(message: Message | TelegramObject) -> Message:
    """A message as JSON; one PTB built (a caller holding PTB's object) as PTB writes it."""
    if isinstance(message, TelegramObject):
        written: Message = message.to_dict()  # type: ignore[assignment]  # PTB's own JSON
        return written
    return message


def full_name(person: User | Chat) -> str | None:
    """The first name and, if any, the last one (PTB's ``full_name``); None without a first."""
    first = person.get("first_name")
    if not first:
        return None
    last = person.get("last_name")
    return f"{first} {last}" if last else first


def chat_name(chat: Chat) -> str | None:
    """A chat's title, else its full name (PTB's ``Chat.effective_name``)."""
    title = chat.get("title")
    return title if title is not None else full_name(chat)


def entity_texts(
    message: Message, field: Literal["text", "caption"], types: Collection[str]
) -> list[tuple[Entity, str]]:
    """The entities of ``types`` of the message's text (or caption), each with the text it
    covers, counted in UTF-16 code units as Telegram counts them: PTB's ``parse_entities``,
    all read at once and raising where it raises (entities of a message without that text,
    an entity cutting a character in two)."""
    key: Literal["entities", "caption_entities"] = (
        "entities" if field == "text" else "caption_entities"
    )
    text = message.get(field)
    found = []
    for entity in message.get(key) or ():
        if entity["type"] in types:
            encoded = text.encode("utf-16-le")  # type: ignore[union-attr]  # None raises, as in PTB
            start, end = entity["offset"] * 2, (entity["offset"] + entity["length"]) * 2
            found.append((entity, encoded[start:end].decode("utf-16-le")))
    return found
