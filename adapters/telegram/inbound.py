"""Telegram update -> the core's Inbound, or why a message is not one (pure functions).

Who is let in (:class:`Rules`: the allowlists, the operators, the group trigger), which
group messages address the bot (a mention, a reply to it, one of its commands, a part of
an addressed album), what the agent reads (the text without ``@bot``, the message replied
to, files, what a location or poll holds) and which conversation it belongs to
(:func:`thread_key`). Apart from :mod:`.render`, the way out: the two share nothing.

They read the update as the JSON it came as (:mod:`.update_json` says why), checked before
(:mod:`.guard`, :mod:`.buildable`); :func:`to_inbound` also takes a message PTB built.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from telegram import TelegramObject

from bridge.engine.commands import parse_command
from bridge.model import Attachment, Inbound

from .update_json import (
    Entity,
    File,
    Message,
    PhotoSize,
    User,
    chat_name,
    entity_texts,
    full_name,
    message_json,
)

SHARED_CHAT_TYPES = frozenset({"group", "supergroup", "channel"})
BLANK = " \t"  # the spaces a removed @mention leaves beside it (never line breaks)


@dataclass(frozen=True)
class Rules:
    """What the adapter lets in (normalized: ids as strings, usernames as lowercase @name)."""

    bot_id: int
    bot_username: str
    allowed_chats: frozenset[str]
    allowed_users: frozenset[str]
    allow_everyone: bool
    operators: frozenset[str]
    group_trigger: str  # "mention" | "all"

    def user_allowed(
        self,
        user: User,
        chat_id: int | None,
        chat_username: str | None,
        keyed_on: int | None = None,
    ) -> bool:
        """``keyed_on``: the id the chat's conversations are keyed on when it is not its
        own (a group upgraded to a supergroup, see moves.py): an allowlist naming either id
        lets it in."""
        if self.allow_everyone:
            return True
        if keyed_on is not None and keyed_on != chat_id and str(keyed_on) in self.allowed_chats:
            return True
        if chat_id is not None and (
            str(chat_id) in self.allowed_chats
            or (chat_username and f"@{chat_username.lower()}" in self.allowed_chats)
        ):
            return True
        return _named(user, self.allowed_users)

    def is_operator(self, user: User) -> bool:
        """``telegram.operators`` names the user by id or by @username."""
        return _named(user, self.operators)


def _named(user: User, entries: frozenset[str]) -> bool:
    """Whether normalized ``entries`` name ``user``: its id, or its username as @name."""
    username = user.get("username")
    return str(user["id"]) in entries or bool(username and f"@{username.lower()}" in entries)


def normalize_ids(values: Collection[int | str]) -> frozenset[str]:
    out = set()
    for v in values:
        s = str(v).strip()
        if s.startswith("@"):
            s = s.lower()
        if s:
            out.add(s)
    return frozenset(out)


@dataclass(frozen=True)
class Ignored:
    outcome: str  # the messages metric's outcome label: "ignored" | "denied"
    reason: str
    # said in the chat (best effort, not stored) when the sender would otherwise wait for
    # an answer that never comes; ``target`` is where (a ReplyTarget's context)
    tell: str | None = None
    target: dict[str, int | bool | str] | None = None


ANONYMOUS_TEXT = (
    "🙈 I can't answer messages sent anonymously or on behalf of a channel: my buttons and "
    "/stop belong to the person who asked. Please write from your own account (for a group "
    'admin: turn off "Remain anonymous").'
)


def thread_key(chat_id: int, thread_id: int | None) -> str:
    return f"telegram:{chat_id}" if thread_id is None else f"telegram:{chat_id}:{thread_id}"


def topic_id(message: Message) -> int | None:
    """The forum topic a message belongs to (None outside forum topics)."""
    thread = message.get("message_thread_id")
    return thread if message.get("is_topic_message") and thread is not None else None


def attachments(message: Message) -> tuple[Attachment, ...]:
    found: list[Attachment] = []
    if (doc := message.get("document")) is not None:
        name = doc.get("file_name") or f"document-{doc['file_unique_id']}"
        found.append(_file(doc, name, doc.get("mime_type")))
    if photos := message.get("photo"):
        p = _largest(photos)
        found.append(_file(p, f"photo-{p['file_unique_id']}.jpg", "image/jpeg"))
    if (v := message.get("voice")) is not None:
        name = f"voice-{v['file_unique_id']}.ogg"
        found.append(_file(v, name, v.get("mime_type") or "audio/ogg"))
    if (a := message.get("audio")) is not None:
        name = a.get("file_name") or f"audio-{a['file_unique_id']}"
        found.append(_file(a, name, a.get("mime_type")))
    if (clip := message.get("video")) is not None:
        name = clip.get("file_name") or f"video-{clip['file_unique_id']}.mp4"
        found.append(_file(clip, name, clip.get("mime_type") or "video/mp4"))
    if (note := message.get("video_note")) is not None:  # a round video message
        found.append(_file(note, f"video-note-{note['file_unique_id']}.mp4", "video/mp4"))
    return tuple(found)


def described(message: Message) -> str:
    """What a message that is neither text nor a file holds, as text the agent can read
    (a shared location, a place, a contact, a poll, a sticker, a dice roll); "" for none.

    Dropped, these left the person who sent one in a private chat hearing nothing at all.
    """
    if (venue := message.get("venue")) is not None:
        where = f"{venue['location']['latitude']}, {venue['location']['longitude']}"
        return f"[Shared a place: {venue['title']}, {venue['address']} ({where})]"
    if (loc := message.get("location")) is not None:
        return f"[Shared a location: {loc['latitude']}, {loc['longitude']}]"
    if (contact := message.get("contact")) is not None:
        name = " ".join(n for n in (contact["first_name"], contact.get("last_name")) if n)
        return f"[Shared a contact: {name}, {contact['phone_number']}]"
    if (poll := message.get("poll")) is not None:
        options = "".join(f"\n- {option['text']}" for option in poll["options"])
        return f"[Poll: {poll['question']}]{options}"
    if (sticker := message.get("sticker")) is not None:
        return f"[Sticker {sticker.get('emoji') or ''}]".replace(" ]", "]")
    if (dice := message.get("dice")) is not None:
        return f"[Rolled {dice['emoji']}: {dice['value']}]"
    return ""


def _merged(first: Sequence[Attachment], more: Sequence[Attachment]) -> tuple[Attachment, ...]:
    """``first`` then the files of ``more`` that are not among them already."""
    known = {a.platform_id for a in first}
    return (*first, *(a for a in more if a.platform_id not in known))


def _file(media: File, name: str, media_type: str | None) -> Attachment:
    """One file of a message (any of the Bot API's file objects) as an Attachment."""
    return Attachment(
        name=name, size=media.get("file_size"), media_type=media_type, platform_id=media["file_id"]
    )


def _largest(sizes: Sequence[PhotoSize]) -> PhotoSize:
    return max(sizes, key=lambda p: (p["width"] * p["height"], p.get("file_size") or 0))


def _command_target(text: str) -> tuple[str, str | None] | None:
    """For ``/cmd@bot rest``: (the text with ``@bot`` removed, ``bot``); None if no command."""
    match = re.match(r"^/([A-Za-z0-9_]+)(?:@([A-Za-z0-9_]+))?(?=\s|$)", text)
    if match is None:
        return None
    stripped = f"/{match.group(1)}{text[match.end() :]}"
    return stripped, match.group(2)


MENTIONS = ("mention", "text_mention")


def _mentions_bot(message: Message, rules: Rules) -> bool:
    wanted = f"@{rules.bot_username.lower()}"
    # as PTB's parse_entities merged: one per (type, offset, length), the first entity
    # with the last text (the caption's over the text's)
    merged: dict[tuple[str, int, int], tuple[Entity, str]] = {}
    for entity, value in [
        *entity_texts(message, "text", MENTIONS),
        *entity_texts(message, "caption", MENTIONS),
    ]:
        key = (entity["type"], entity["offset"], entity["length"])
        merged[key] = (merged[key][0] if key in merged else entity, value)
    for entity, value in merged.values():
        if entity["type"] == "mention" and value.lower() == wanted:
            return True
        user = entity.get("user")
        if entity["type"] == "text_mention" and user is not None and user["id"] == rules.bot_id:
            return True
    return False


def _replies_to_bot(message: Message, rules: Rules) -> bool:
    reply = message.get("reply_to_message")
    if reply is None or reply.get("forum_topic_created") is not None:
        return False  # in a forum every message "replies" to the topic's first message
    sender = reply.get("from")
    return sender is not None and sender["id"] == rules.bot_id


def without_mentions(text: str, bot_username: str) -> str:
    """``text`` without ``@bot``: only the gap each mention leaves is tidied.

    The text is what the agent reads (code, YAML, a Makefile), so spaces elsewhere are kept
    as written. Between words the gap becomes one space; at the start of a line or before
    its end the spaces beside the mention go; the text is stripped only at an end that a
    mention opened or closed, and at the start no further than the last line break, so the
    first line of an indented block after ``@bot`` keeps its indentation.
    """
    if not bot_username:
        return text
    mention = re.compile(rf"(?<![\w@])@{re.escape(bot_username)}(?!\w)", re.IGNORECASE)
    pieces = mention.split(text)
    if len(pieces) == 1:
        return text
    joined = pieces[0]
    for piece in pieces[1:]:
        left, right = joined.rstrip(BLANK), piece.lstrip(BLANK)
        between_words = left[-1:] not in ("", "\n", "\r") and right[:1] not in ("", "\n", "\r")
        joined = left + (" " if between_words else "") + right
    if not pieces[0].strip():  # a mention opened the text
        lead = joined[: len(joined) - len(joined.lstrip())]
        joined = joined[lead.rfind("\n") + 1 if "\n" in lead else len(lead) :]
    if not pieces[-1].strip():  # a mention closed it
        joined = joined.rstrip()
    return joined


def replied_context(message: Message, rules: Rules) -> Message | None:
    """The message this one replies to when the agent cannot know it otherwise: a
    colleague's log line under "@bot what does this mean?", a photo under "what is this?".

    Not the bot's own answer (it is in the conversation's history) unless a part of it was
    quoted, and not the opening of a forum topic (every topic message "replies" to it).
    """
    reply = message.get("reply_to_message")
    if reply is None or reply.get("forum_topic_created") is not None:
        return None
    sender = reply.get("from")
    if sender is not None and sender["id"] == rules.bot_id and message.get("quote") is None:
        return None
    return reply


def _author(message: Message) -> str:
    if (sender := message.get("from")) is not None:
        return display_name(sender)
    if (chat := message.get("sender_chat")) is not None:
        return chat_name(chat) or str(chat["id"])
    return "someone"


def with_reply_context(text: str, message: Message, reply: Message) -> str:
    """``text`` after the replied-to message, quoted (the part the person quoted, if any)."""
    quote = message.get("quote")
    quoted = quote["text"] if quote is not None else reply.get("text") or reply.get("caption") or ""
    files = attachments(reply)
    head = f"In reply to {_author(reply)}" + (" (its files are attached):" if files else ":")
    lines = [head, *(f"> {line}" for line in quoted.splitlines())]
    return "\n".join(lines) + (f"\n\n{text}" if text else "")


def display_name(user: User) -> str:
    """How the chat shows a person (a message's sender, the presser of a Stop)."""
    return full_name(user) or user.get("username") or str(user["id"])


def _on_behalf_of_a_chat(message: Message, rules: Rules, keyed_on: int | None) -> Ignored:
    """Ignored; told so when it was sent to the bot (a mention, a reply to it, one of its
    commands) anonymously or as a channel by someone in an allowed chat, who would
    otherwise wait for an answer. A channel's automatic forward is never told."""
    ignored = Ignored("ignored", "sent on behalf of a chat, not by a person")
    chat, user = message["chat"], message.get("from")
    if message.get("is_automatic_forward") or user is None:
        return ignored
    if not rules.user_allowed(user, chat["id"], chat.get("username"), keyed_on):
        return ignored
    text = message.get("text") or message.get("caption") or ""
    command = _command_target(text.lstrip())
    ours = command is not None and (
        (command[1] or "").lower() == rules.bot_username.lower()
        or (command[1] is None and parse_command(command[0]) is not None)
    )
    if not (ours or _mentions_bot(message, rules) or _replies_to_bot(message, rules)):
        return ignored
    target: dict[str, int | bool | str] = {
        "chat_id": chat["id"],
        "message_id": message["message_id"],
    }
    topic = topic_id(message)
    if topic is not None:
        target["thread_id"] = topic
    if chat["type"] in SHARED_CHAT_TYPES:
        target["shared"] = True
    return dataclasses.replace(ignored, tell=ANONYMOUS_TEXT, target=target)


def album_of(message: Message) -> str | None:
    """The album (media group) a message is one part of, as ``chat:media_group_id``."""
    group = message.get("media_group_id")
    return f"{message['chat']['id']}:{group}" if group else None


def to_inbound(
    update_id: int,
    message: Message | TelegramObject,
    rules: Rules,
    addressed_albums: AbstractSet[str] = frozenset(),
    keyed_on: int | None = None,
) -> Inbound | Ignored:
    """The message as the core's Inbound, or why it is not one.

    ``keyed_on``: the chat id the chat's conversations are keyed on when it is not its own
    (a group upgraded to a supergroup, see moves.py); the allowlist takes either id.

    ``addressed_albums``: albums (:func:`album_of`) one part of which addressed the bot in a
    group; their other parts (a caption mentions the bot only on the first) are let in too.
    """
    message = message_json(message)
    if message.get("sender_chat") is not None or message.get("is_automatic_forward"):
        # a channel's post copied into its discussion group (from "Telegram", 777000, not a
        # bot), or a message sent as a channel or anonymously as the group (from Telegram's
        # stand-in bots): no person to answer, to bind buttons to, or to count a run against
        return _on_behalf_of_a_chat(message, rules, keyed_on)
    user = message.get("from")
    if user is None or user.get("is_bot"):
        return Ignored("ignored", "sent by a bot")
    chat = message["chat"]
    first = chat["id"] if keyed_on is None else keyed_on
    if not rules.user_allowed(user, chat["id"], chat.get("username"), keyed_on):
        return Ignored("denied", f"user {user['id']} in chat {chat['id']} is not on the allowlist")
    text = message.get("text") or message.get("caption") or described(message)
    files = attachments(message)
    if not text.strip() and not files:
        return Ignored("ignored", "no text and no file (a service message)")
    shared = chat["type"] in SHARED_CHAT_TYPES
    command = _command_target(text.lstrip())
    ours = False  # a command this bot was named in, or one of its own
    if command is not None:
        stripped, addressee = command
        if addressee is not None and addressee.lower() != rules.bot_username.lower():
            return Ignored("ignored", f"a command for another bot (@{addressee})")
        text = stripped
        # a bare /weather in a group is some other bot's (Telegram hands bare commands to
        # every bot that reads the group): only this bot's own are addressed without a name
        ours = addressee is not None or parse_command(stripped) is not None
    album = album_of(message)
    addressed = (
        ours
        or not shared
        or rules.group_trigger == "all"
        or (album is not None and album in addressed_albums)
    )
    if not (addressed or _mentions_bot(message, rules) or _replies_to_bot(message, rules)):
        return Ignored("ignored", "a group message not addressed to the bot")
    cleaned = without_mentions(text, rules.bot_username)
    replied = replied_context(message, rules) if parse_command(cleaned) is None else None
    if replied is not None:
        text = with_reply_context(cleaned, message, replied)
        files = _merged(files, attachments(replied))
    elif cleaned.strip() or files:
        text = cleaned
    else:  # a bare "@bot": the help, as Slack answers a bare mention (not a run on "@bot")
        text = "/help"
    topic = topic_id(message)
    target: dict[str, int | bool | str] = {
        "chat_id": chat["id"],
        "message_id": message["message_id"],
    }
    if topic is not None:
        target["thread_id"] = topic
    if shared:
        target["shared"] = True
    if username := chat.get("username"):  # a public chat: links (t.me/<name>/<id>) carry it
        target["chat_username"] = username.lower()
    return Inbound(
        platform="telegram",
        event_id=f"{rules.bot_id}:{update_id}",
        thread_key=thread_key(first, topic),
        sender_id=str(user["id"]),
        sender_name=display_name(user),
        text=text,
        attachments=files,
        shared_chat=shared,
        is_operator=rules.is_operator(user),
        target=dict(target),
        part_of=album,
    )
