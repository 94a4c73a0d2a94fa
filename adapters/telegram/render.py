"""Markdown -> Telegram messages: text and entities, at most a message long each (pure).

The conversion is telegramify-markdown's (a maintained converter that measures offsets in
UTF-16 code units, as Telegram does). The core splits an answer on its Markdown tree in
Telegram's unit (:mod:`bridge.markdown`, UTF-16 code units), so each part it hands over
renders as one message; a text whose rendering is still longer than a message is split the
same way here, on its Markdown, and only a part whose rendering grew past the limit (links
written out, say) is cut by telegramify's own ``split_entities``.

Telegram refuses a whole message's entities for one it does not accept, and the surface
then sends the answer unformatted; so what the converter would produce but Telegram
refuses is mended: the source before conversion (:mod:`.mend`, :mod:`.link_targets`),
and here the entities after it, which nest only as the Bot API allows (quotes are
flattened); lone ``\\r`` line ends are read as newlines. The way in (updates -> the
core's Inbound) is :mod:`.inbound`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import telegramify_markdown
from telegram import MessageEntity

from bridge.markdown import UTF16, Ruler, split_markdown

from .link_targets import fix_links, readable_links
from .mend import bare_urls, broken_after_blocks, literal_html

MAX_MESSAGE = 4096  # Telegram's limit, in UTF-16 code units, after entity parsing
# the converter's settings for this adapter alone (its default config is process-global):
# an open task shows an empty box, not the library's ☑ that reads as done next to ✅
RENDER_CONFIG = telegramify_markdown.RenderConfig.isolated()
RENDER_CONFIG.markdown_symbol.task_uncompleted = "\N{WHITE LARGE SQUARE}"  # ⬜
SPLITTABLE = frozenset({"bold", "italic", "underline", "strikethrough", "spoiler"})
QUOTES = frozenset({"blockquote", "expandable_blockquote"})
CODE = frozenset({"code", "pre"})
TgEntity = telegramify_markdown.MessageEntity


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


def convert(markdown: str) -> tuple[str, list[TgEntity]]:
    """``markdown`` (its line breaks "\n") as Telegram text and the entities it accepts: one
    piece, not split, and empty where it shows nothing (an empty code block)."""
    image = RENDER_CONFIG.markdown_symbol.image
    source = broken_after_blocks(readable_links(literal_html(bare_urls(markdown)), image))
    text, entities = telegramify_markdown.convert(source, config=RENDER_CONFIG)
    return text, _nest(fix_links(entities))


MIN_ROOM = 256  # the least a Markdown part is cut to before its rendering is cut instead


def _fitted(markdown: str, limit: int, room: int) -> list[tuple[str, list[TgEntity]]]:
    """``markdown`` split on its tree into parts of at most ``room`` UTF-16 units, each
    rendered; one whose rendering is over ``limit`` (the conversion wrote more than the
    Markdown held) is split again with less room, and cut as text below ``MIN_ROOM``."""
    out: list[tuple[str, list[TgEntity]]] = []
    for piece in split_markdown(markdown, room, UTF16):
        text, entities = convert(piece)
        size = utf16_len(text)
        if size <= limit:
            out.append((text, entities))
        elif room > MIN_ROOM:
            out += _fitted(piece, limit, max(MIN_ROOM, room * limit // size * 9 // 10))
        else:
            out += telegramify_markdown.split_entities(text, entities, limit)
    return out


def render(markdown: str, limit: int = MAX_MESSAGE) -> list[Part]:
    """Markdown as Telegram messages of at most ``limit`` UTF-16 units each: one when its
    rendering fits, else its Markdown split on its tree and each part rendered."""
    markdown = markdown.replace("\r\n", "\n").replace("\r", "\n")
    text, entities = convert(markdown)
    if not text.strip():
        fallback = markdown.strip() or "…"
        return [Part(chunk, ()) for chunk in split_plain(fallback, limit)]
    chunks = [(text, entities)]
    if utf16_len(text) > limit:
        chunks = _fitted(markdown, limit, max(limit, MIN_ROOM))
    parts = [Part(t, tuple(_entity(e) for e in ents)) for t, ents in chunks if t.strip()]
    return parts or [Part("…", ())]


# -- entity nesting -----------------------------------------------------------------------------


def _rank(kind: str) -> int:
    """Which of two entities over the same text is the outer one."""
    if kind in QUOTES:
        return 0
    if kind in SPLITTABLE:
        return 3
    if kind in CODE:
        return 2
    return 1  # links, mentions, custom emoji: a link over code keeps the link


def _nest(entities: list[TgEntity]) -> list[TgEntity]:
    """Only the nestings Telegram allows: none inside ``pre``/``code``, no quote in a quote
    (an inner quote is flattened into the outer one), inside a link or other "continuous"
    entity only bold/italic/underline/strikethrough/spoiler, and no partial overlaps.

    The Bot API's formatting options state these rules; TDLib, which applies them, lets a
    blockquote contain anything but another blockquote, so a code block in a quote stays.
    """
    order = sorted(entities, key=lambda e: (e.offset, -e.length, _rank(e.type)))
    kept: list[TgEntity] = []
    chain: list[TgEntity] = []  # the kept entities containing the current one, outermost first
    for e in order:
        while chain and chain[-1].offset + chain[-1].length <= e.offset:
            chain.pop()
        if chain and chain[-1].offset + chain[-1].length < e.offset + e.length:
            continue  # a partial overlap
        outer = {c.type for c in chain}
        if outer & CODE:
            continue
        if e.type in QUOTES and outer & QUOTES:
            continue
        if e.type not in SPLITTABLE and e.type not in QUOTES and outer - SPLITTABLE - QUOTES:
            continue
        kept.append(e)
        chain.append(e)
    return kept


# -- plain text ------------------------------------------------------------------------------


def utf16_len(text: str) -> int:
    return telegramify_markdown.utf16_len(text)


def split_plain(text: str, limit: int = MAX_MESSAGE) -> list[str]:
    """Plain text (what renders as nothing as Markdown) in parts of at most ``limit``
    UTF-16 units, each ending after a newline where one is in the second half of the room,
    else after the last space or newline: a word is cut only when the room holds no space.
    (telegramify's ``split_entities`` cuts only at newlines.)"""
    at = Ruler(UTF16).offsets(text)
    parts: list[str] = []
    start, size = 0, len(text)
    while at.at(size) - at.at(start) > limit:
        hard = max(at.index(at.at(start) + limit), start + 1)
        found = text.rfind("\n", start + (hard - start) // 2, hard)
        if found < 0:
            found = max(text.rfind(c, start, hard) for c in " \n\t")
        cut = found + 1 if found >= 0 else hard
        parts.append(text[start:cut])
        start = cut
    parts.append(text[start:size])
    kept = [p for p in parts if p.strip()]
    return kept or parts[:1]


def first_part(markdown: str) -> Part:
    """For an edit (one message): the first part, with a mark when the rest was cut."""
    parts = render(markdown, MAX_MESSAGE - 2)
    if len(parts) == 1:
        return parts[0]
    return Part(parts[0].text.rstrip() + " …", parts[0].entities)
