"""Converting between Telegram and the core's model (pure functions, no network).

Markdown -> Telegram text + entities is done by telegramify-markdown (a maintained
converter that measures offsets in UTF-16 code units, as Telegram does) and split to
Telegram's 4096-unit limit with entities clipped into each part, never cut open. Raw HTML
in an answer (``<your-token>``, ``Vec<u8>``, an XML snippet outside a fence) is shown as
the text it is: the converter drops HTML it has no entity for.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import pyromark
import telegramify_markdown
from telegram import Message, MessageEntity, PhotoSize, User

from bridge.model import Attachment, Inbound

MAX_MESSAGE = 4096  # Telegram's limit, in UTF-16 code units, after entity parsing
COMMANDS: tuple[tuple[str, str], ...] = (
    ("start", "What this bot does"),
    ("help", "How to talk to the agent, and the commands"),
    ("new", "Start a fresh conversation (files stay)"),
    ("status", "What is running, what waits, the last run's cost"),
    ("stop", "Stop the current run"),
)
SHARED_CHAT_TYPES = frozenset({"group", "supergroup", "channel"})
# the parser options telegramify-markdown parses with (its converter.STANDARD_OPTIONS)
PARSE_OPTIONS = (
    pyromark.Options.ENABLE_TABLES
    | pyromark.Options.ENABLE_STRIKETHROUGH
    | pyromark.Options.ENABLE_TASKLISTS
    | pyromark.Options.ENABLE_MATH
)
KEPT_HTML = frozenset({"<tg-spoiler>", "</tg-spoiler>"})  # the one tag Telegram shows


# -- Markdown -> Telegram --------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    text: str
    entities: tuple[MessageEntity, ...]


def _entity(e: telegramify_markdown.MessageEntity) -> MessageEntity:
    return MessageEntity(
        type=e.type,
        offset=e.offset,
        length=e.length,
        url=e.url,
        language=e.language,
        custom_emoji_id=e.custom_emoji_id,
    )


def literal_html(markdown: str) -> str:
    """``markdown`` with raw HTML escaped (``\\<``), so it shows as the text it is.

    CommonMark reads ``<your-token>`` or ``List<String>`` as inline HTML and a line that
    starts with a tag as an HTML block; the converter drops both. The parser says where
    they are (code spans and blocks are never HTML), and each ``<`` there is escaped.
    """
    if "<" not in markdown:
        return markdown
    raw = markdown.encode()
    cuts: list[int] = []  # byte offsets of each "<" to escape
    for payload, where in pyromark.events_with_range(markdown, options=PARSE_OPTIONS):
        if not isinstance(payload, dict):
            continue
        html = payload.get("InlineHtml", payload.get("Html"))
        if not isinstance(html, str) or html.strip().lower() in KEPT_HTML:
            continue
        start, end = where["start"], where["end"]
        cuts.extend(i for i in range(start, end) if raw[i] == 0x3C)  # "<"
    if not cuts:
        return markdown
    out = bytearray()
    last = 0
    for i in sorted(set(cuts)):
        out += raw[last:i] + b"\\"
        last = i
    out += raw[last:]
    return out.decode()


def render(markdown: str, limit: int = MAX_MESSAGE) -> list[Part]:
    """Markdown as Telegram messages of at most ``limit`` UTF-16 units each."""
    text, entities = telegramify_markdown.convert(literal_html(markdown))
    if not text.strip():
        fallback = markdown.strip() or "…"
        return [Part(chunk, ()) for chunk in split_plain(fallback, limit)]
    chunks = telegramify_markdown.split_entities(text, entities, limit)
    parts = [Part(t, tuple(_entity(e) for e in ents)) for t, ents in chunks if t.strip()]
    return parts or [Part("…", ())]


def utf16_len(text: str) -> int:
    return telegramify_markdown.utf16_len(text)


def split_plain(text: str, limit: int = MAX_MESSAGE) -> list[str]:
    """Plain text in parts of at most ``limit`` UTF-16 units, cut at newlines where possible."""
    parts: list[str] = []
    rest = text
    while utf16_len(rest) > limit:
        cut = limit
        while utf16_len(rest[:cut]) > limit:  # astral characters take two units
            cut -= 1
        newline = rest.rfind("\n", 0, cut)
        if newline > cut // 2:
            cut = newline + 1
        parts.append(rest[:cut])
        rest = rest[cut:]
    if rest.strip() or not parts:
        parts.append(rest)
    return parts


def first_part(markdown: str) -> Part:
    """For an edit (one message): the first part, with a mark when the rest was cut."""
    parts = render(markdown, MAX_MESSAGE - 2)
    if len(parts) == 1:
        return parts[0]
    return Part(parts[0].text.rstrip() + " …", parts[0].entities)


# -- Telegram -> Inbound ---------------------------------------------------------------------


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

    def user_allowed(self, user: User, chat_id: int | None, chat_username: str | None) -> bool:
        if self.allow_everyone:
            return True
        if chat_id is not None and (
            str(chat_id) in self.allowed_chats
            or (chat_username and f"@{chat_username.lower()}" in self.allowed_chats)
        ):
            return True
        return str(user.id) in self.allowed_users or bool(
            user.username and f"@{user.username.lower()}" in self.allowed_users
        )


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


def thread_key(chat_id: int, thread_id: int | None) -> str:
    return f"telegram:{chat_id}" if thread_id is None else f"telegram:{chat_id}:{thread_id}"


def topic_id(message: Message) -> int | None:
    """The forum topic a message belongs to (None outside forum topics)."""
    if message.is_topic_message and message.message_thread_id is not None:
        return message.message_thread_id
    return None


def attachments(message: Message) -> tuple[Attachment, ...]:
    found: list[Attachment] = []
    if message.document is not None:
        d = message.document
        found.append(
            Attachment(
                name=d.file_name or f"document-{d.file_unique_id}",
                size=d.file_size,
                media_type=d.mime_type,
                platform_id=d.file_id,
            )
        )
    if message.photo:
        p = _largest(message.photo)
        found.append(
            Attachment(
                name=f"photo-{p.file_unique_id}.jpg",
                size=p.file_size,
                media_type="image/jpeg",
                platform_id=p.file_id,
            )
        )
    if message.voice is not None:
        v = message.voice
        found.append(
            Attachment(
                name=f"voice-{v.file_unique_id}.ogg",
                size=v.file_size,
                media_type=v.mime_type or "audio/ogg",
                platform_id=v.file_id,
            )
        )
    if message.audio is not None:
        a = message.audio
        found.append(
            Attachment(
                name=a.file_name or f"audio-{a.file_unique_id}",
                size=a.file_size,
                media_type=a.mime_type,
                platform_id=a.file_id,
            )
        )
    return tuple(found)


def _largest(sizes: Sequence[PhotoSize]) -> PhotoSize:
    return max(sizes, key=lambda p: (p.width * p.height, p.file_size or 0))


def _command_target(text: str) -> tuple[str, str | None] | None:
    """For ``/cmd@bot rest``: (the text with ``@bot`` removed, ``bot``); None if no command."""
    match = re.match(r"^/([A-Za-z0-9_]+)(?:@([A-Za-z0-9_]+))?(?=\s|$)", text)
    if match is None:
        return None
    stripped = f"/{match.group(1)}{text[match.end() :]}"
    return stripped, match.group(2)


def _mentions_bot(message: Message, rules: Rules) -> bool:
    wanted = f"@{rules.bot_username.lower()}"
    parsed = message.parse_entities(["mention", "text_mention"]) or {}
    parsed_caption = message.parse_caption_entities(["mention", "text_mention"]) or {}
    for entity, value in {**parsed, **parsed_caption}.items():
        if entity.type == MessageEntity.MENTION and value.lower() == wanted:
            return True
        if (
            entity.type == MessageEntity.TEXT_MENTION
            and entity.user is not None
            and entity.user.id == rules.bot_id
        ):
            return True
    return False


def _replies_to_bot(message: Message, rules: Rules) -> bool:
    reply = message.reply_to_message
    if reply is None or reply.forum_topic_created is not None:
        return False  # in a forum every message "replies" to the topic's first message
    return reply.from_user is not None and reply.from_user.id == rules.bot_id


def to_inbound(update_id: int, message: Message, rules: Rules) -> Inbound | Ignored:
    """The message as the core's Inbound, or why it is not one."""
    user = message.from_user
    if user is None or user.is_bot:
        return Ignored("ignored", "sent by a bot or on behalf of a chat")
    chat = message.chat
    if not rules.user_allowed(user, chat.id, chat.username):
        return Ignored("denied", f"user {user.id} in chat {chat.id} is not on the allowlist")
    text = message.text or message.caption or ""
    files = attachments(message)
    if not text.strip() and not files:
        return Ignored("ignored", "no text and no file (a service message)")
    shared = chat.type in SHARED_CHAT_TYPES
    command = _command_target(text.lstrip())
    if command is not None:
        stripped, addressee = command
        if addressee is not None and addressee.lower() != rules.bot_username.lower():
            return Ignored("ignored", f"a command for another bot (@{addressee})")
        text = stripped
    addressed = command is not None or not shared or rules.group_trigger == "all"
    if not (addressed or _mentions_bot(message, rules) or _replies_to_bot(message, rules)):
        return Ignored("ignored", "a group message not addressed to the bot")
    mention = re.compile(rf"(?<![\w@])@{re.escape(rules.bot_username)}(?!\w)", re.IGNORECASE)
    cleaned = re.sub(r"[ \t]{2,}", " ", mention.sub("", text)).strip()
    if cleaned or files:
        text = cleaned
    topic = topic_id(message)
    target: dict[str, int | bool] = {"chat_id": chat.id, "message_id": message.message_id}
    if topic is not None:
        target["thread_id"] = topic
    if shared:
        target["shared"] = True
    return Inbound(
        platform="telegram",
        event_id=f"{rules.bot_id}:{update_id}",
        thread_key=thread_key(chat.id, topic),
        sender_id=str(user.id),
        sender_name=user.full_name or user.username or str(user.id),
        text=text,
        attachments=files,
        shared_chat=shared,
        is_operator=str(user.id) in rules.operators,
        target=dict(target),
    )
