"""Converting between Telegram and the core's model (pure functions, no network).

Markdown -> Telegram text + entities is done by telegramify-markdown (a maintained
converter that measures offsets in UTF-16 code units, as Telegram does). The core splits
an answer on its Markdown tree in Telegram's unit (:mod:`bridge.markdown`, UTF-16 code
units), so each part it hands over renders as one message; a text whose rendering is still
longer than a message is split the same way here, on its Markdown, and only a part whose
rendering grew past the limit (links written out, say) is cut by telegramify's own
``split_entities``. Raw HTML
in an answer (``<your-token>``, ``Vec<u8>``, an XML snippet outside a fence) is shown as
the text it is: the converter drops HTML it has no entity for.

Telegram refuses a whole message's entities for one it does not accept, and the surface
then sends the answer unformatted; so what the converter would produce but Telegram
refuses is mended here: a link to a relative path or anchor becomes the path in code (a
coding agent links files constantly), entities nest only as the Bot API allows (quotes
are flattened), and lone ``\\r`` line ends are read as newlines. In a list item the
converter runs the text after a table, code block, heading or rule onto its last line
(``x | ypara``): a hard line break opens that text. What the converter loses is kept:
the URL of a link in a table (sent as a code block: the link gets a number, its URL is
listed after the table) or of a link without text.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections.abc import Collection, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

import pyromark
import telegramify_markdown
from telegram import Message, MessageEntity, PhotoSize, User

from bridge.engine.commands import parse_command
from bridge.markdown import PARSE_OPTIONS, UTF16, Ruler, code_span, split_markdown
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
KEPT_HTML = frozenset({"<tg-spoiler>", "</tg-spoiler>"})  # the one tag Telegram shows
# the converter's settings for this adapter alone (its default config is process-global):
# an open task shows an empty box, not the library's ☑ that reads as done next to ✅
RENDER_CONFIG = telegramify_markdown.RenderConfig.isolated()
RENDER_CONFIG.markdown_symbol.task_uncompleted = "\N{WHITE LARGE SQUARE}"  # ⬜
# what a text_link may point to: Telegram refuses a URL without a host ("URL host is empty")
WEB_URL = re.compile(r"(?i)(?:https?://[^\s/?#]|tg://|mailto:)")
EMAIL = re.compile(r"[^\s@/:<>()]+@[^\s@/:<>()]+\.[^\s@/:<>()]+")
INLINE_SYNTAX = frozenset("\\`*_[]<>&~$|!")  # escaped where a URL is written as text
SPLITTABLE = frozenset({"bold", "italic", "underline", "strikethrough", "spoiler"})
QUOTES = frozenset({"blockquote", "expandable_blockquote"})
CODE = frozenset({"code", "pre"})
BLANK = " \t"  # the spaces a removed @mention leaves beside it (never line breaks)
TgEntity = telegramify_markdown.MessageEntity


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


# blocks the converter ends, inside a list item, without a line break after them
UNENDED_BLOCKS = frozenset({"Table", "CodeBlock", "Heading", "Rule"})
INLINE_STARTS = frozenset({"Paragraph", "Strong", "Emphasis", "Strikethrough", "Link", "Image"})
INLINE_EVENTS = frozenset({"Text", "Code", "InlineMath", "InlineHtml", "FootnoteReference"})
UNDERLINE = re.compile(rb"(?:=+|-+)[ ]*(?:\n|$)")  # a setext heading's underline
# blocks the converter runs onto the item text before them while no block has ended yet
GLUED_BLOCKS = frozenset({"CodeBlock", "Table", "Heading", "BlockQuote"})
# ends the converter counts as a block's end (a paragraph's only outside lists)
COUNTED_ENDS = frozenset({"Heading", "CodeBlock", "BlockQuote", "Table"})


def _name(tag: Any) -> str:
    return tag if isinstance(tag, str) else next(iter(tag), "") if isinstance(tag, dict) else ""


def broken_after_blocks(markdown: str) -> str:
    """``markdown`` with a hard line break (``\\`` and a newline) opening the text that
    follows a table, code block, heading or rule in a list item.

    In a list item the converter writes such text straight after the block, with no line
    break: a paragraph under a table read ``x | ypara``, one under a code block ``xpara``
    (outside lists it adds the break itself). The hard break puts it on a line of its own,
    as the text would be anywhere else; the new line keeps the paragraph's quote marks and
    indentation.

    The converter also runs a tight item's text into a code block, table, heading or quote
    that follows it in the item (``- item`` over a fence read ``itemcode``) until some
    block of the message has ended (then it adds the line break itself): a blank line
    before such a block, while none has ended, makes the item's text a paragraph of its
    own, ended by a line break.
    """
    if "\n" not in markdown:
        return markdown
    raw = markdown.encode()
    # [the container's name, whether a block just ended in it, whether inline text did]
    stack: list[list[Any]] = []
    cuts: list[tuple[int, bool]] = []  # byte offsets where a hard break (or a blank line) goes
    ended = False  # whether the converter has counted a block's end yet
    for payload, where in pyromark.events_with_range(markdown, options=PARSE_OPTIONS):
        event: Any = payload
        in_item = bool(stack) and stack[-1][0] == "Item"
        if isinstance(event, str):  # a rule, a soft or hard break
            if event == "Rule":
                if in_item and stack[-1][2] and not ended:
                    cuts.append((where["start"], False))
                ended = True
            if in_item:
                stack[-1][1:] = [event == "Rule", event != "Rule"]
            continue
        if not isinstance(event, dict):
            continue
        if "End" in event:
            name = stack.pop()[0] if stack else ""
            lists = sum(entry[0] == "List" for entry in stack)
            if name in COUNTED_ENDS or (name in ("Paragraph", "List") and not lists):
                ended = True
            if stack and stack[-1][0] == "Item":
                stack[-1][1:] = [name in UNENDED_BLOCKS, name in INLINE_STARTS - {"Paragraph"}]
            continue
        opened = _name(event["Start"]) if "Start" in event else ""
        inline = opened in INLINE_STARTS or bool(INLINE_EVENTS & event.keys())
        if in_item and stack[-1][1] and inline:
            cuts.append((where["start"], True))
        if in_item and stack[-1][2] and opened in GLUED_BLOCKS and not ended:
            cuts.append((where["start"], False))
        if "DisplayMath" in event:
            ended = True
        if in_item:
            stack[-1][1:] = [False, inline and opened != "Paragraph"]
        if opened:
            stack.append([opened, False, False])
    if not cuts:
        return markdown
    out = bytearray()
    last = 0
    for at, hard in cuts:
        line = raw[raw.rfind(b"\n", 0, at) + 1 : at].decode()
        prefix = "".join(c if c == ">" else " " for c in line)  # its quote marks, indentation
        if not hard:  # a blank line before the block
            out += raw[last:at] + b"\n" + prefix.encode()
            last = at
            continue
        # a first line of = would underline the break's line as a heading: escaped
        escape = b"\\" if UNDERLINE.match(raw, at) else b""
        out += raw[last:at] + b"\\\n" + prefix.encode() + escape
        last = at
    out += raw[last:]
    return out.decode()


# a bare web address as GitHub finds one in text (its extended autolinks); what ends it
BARE_URL = re.compile(rb"(?<![\w@])https?://[^\s<>|`\\]+")
URL_TAIL = b"?!.,:;*_~'\""  # trailing punctuation, not part of the address
NOT_TEXT = frozenset({"Code", "InlineHtml", "Html", "InlineMath", "DisplayMath"})
NOT_TEXT_BLOCKS = frozenset({"CodeBlock", "Link", "Image", "HtmlBlock"})


def bare_urls(markdown: str) -> str:
    """``markdown`` with each bare web address in its text made an autolink (``<url>``).

    The converter has no extended autolinks, so a bare ``https://…/pkg/__init__.py`` was
    read as Markdown: ``__init__`` in bold, the underscores gone, and Telegram linked the
    address that was left, which does not exist. Written as an autolink it is shown and
    linked as it is. Addresses in code, links and raw HTML are left alone; punctuation that
    ends a sentence, and a closing parenthesis the address did not open, stay outside it.
    """
    if "://" not in markdown:
        return markdown
    raw = markdown.encode()
    skip: list[tuple[int, int]] = []  # byte ranges that are not text: code, links, HTML
    for payload, where in pyromark.events_with_range(markdown, options=PARSE_OPTIONS):
        if not isinstance(payload, dict):
            continue
        event: Any = payload
        opened = event.get("Start")
        if NOT_TEXT & event.keys() or _name(opened) in NOT_TEXT_BLOCKS:
            skip.append((where["start"], where["end"]))
    skip.sort()
    starts = [a for a, _ in skip]
    out = bytearray()
    last = 0
    for m in BARE_URL.finditer(raw):
        start, end = m.start(), m.end()
        k = bisect.bisect_right(starts, start) - 1
        if k >= 0 and start < skip[k][1]:
            continue
        while end > start and (
            raw[end - 1] in URL_TAIL
            or (raw[end - 1] == 0x29 and raw.count(b")", start, end) > raw.count(b"(", start, end))
        ):
            end -= 1
        if end - start <= len(b"https://"):
            continue
        out += raw[last:start] + b"<" + raw[start:end] + b">"
        last = end
    if not last:
        return markdown
    out += raw[last:]
    return out.decode()


def _converted(markdown: str) -> tuple[str, list[TgEntity]]:
    """``markdown`` (its line breaks "\n") as Telegram text and the entities it accepts."""
    source = broken_after_blocks(readable_links(literal_html(bare_urls(markdown))))
    text, entities = telegramify_markdown.convert(source, config=RENDER_CONFIG)
    return text, _nest(_fix_links(entities))


MIN_ROOM = 256  # the least a Markdown part is cut to before its rendering is cut instead


def _fitted(markdown: str, limit: int, room: int) -> list[tuple[str, list[TgEntity]]]:
    """``markdown`` split on its tree into parts of at most ``room`` UTF-16 units, each
    rendered; one whose rendering is over ``limit`` (the conversion wrote more than the
    Markdown held) is split again with less room, and cut as text below ``MIN_ROOM``."""
    out: list[tuple[str, list[TgEntity]]] = []
    for piece in split_markdown(markdown, room, UTF16):
        text, entities = _converted(piece)
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
    text, entities = _converted(markdown)
    if not text.strip():
        fallback = markdown.strip() or "…"
        return [Part(chunk, ()) for chunk in split_plain(fallback, limit)]
    chunks = [(text, entities)]
    if utf16_len(text) > limit:
        chunks = _fitted(markdown, limit, max(limit, MIN_ROOM))
    parts = [Part(t, tuple(_entity(e) for e in ents)) for t, ents in chunks if t.strip()]
    return parts or [Part("…", ())]


# -- links Telegram can open -------------------------------------------------------------------


def web_url(url: str) -> str | None:
    """``url`` as Telegram accepts it in a ``text_link`` (``mailto:`` added to a bare
    address), or None: a relative path, an anchor or a host-less URL makes Telegram refuse
    the whole message's formatting."""
    if WEB_URL.match(url):
        return url
    if EMAIL.fullmatch(url):
        return f"mailto:{url}"
    return None


def _escaped(text: str) -> str:
    """``text`` with the characters that are Markdown syntax inline backslash-escaped."""
    return "".join(f"\\{c}" if c in INLINE_SYNTAX else c for c in text)


@dataclass
class _Link:
    start: int  # UTF-8 byte range of the whole link or image in the source
    end: int
    url: str
    kind: str  # Inline | Reference | Autolink | Email | ...
    image: bool
    table: tuple[int, int] | None  # the byte range of the table it is in
    inner_start: int = -1  # byte range of the link text (the alt text of an image)
    inner_end: int = -1
    plain: str = ""  # the link text without its markup

    @property
    def in_table(self) -> bool:
        return self.table is not None


def _links(markdown: str) -> list[_Link]:
    """Every link and image of ``markdown``, with where its text is and its table if any."""
    found: list[_Link] = []
    open_links: list[_Link] = []  # an image can sit inside a link's text
    table: tuple[int, int] | None = None
    for payload, where in pyromark.events_with_range(markdown, options=PARSE_OPTIONS):
        event: Any = payload  # pyromark's union of TypedDicts, read as the dicts they are
        start, end = where["start"], where["end"]
        opened = event.get("Start") if isinstance(event, dict) else None
        closed = event.get("End") if isinstance(event, dict) else None
        if isinstance(opened, dict) and ("Link" in opened or "Image" in opened):
            data: Any = opened["Link"] if "Link" in opened else opened["Image"]
            for outer in open_links:
                _widen(outer, start, end)
            link = _Link(
                start,
                end,
                url=str(data["dest_url"]),
                kind=str(data["link_type"]),
                image="Image" in opened,
                table=table,
            )
            open_links.append(link)
            found.append(link)
            continue
        if closed in ("Link", "Image"):
            open_links.pop()
            continue
        if isinstance(opened, dict) and "Table" in opened:
            table = (start, end)  # tables do not nest
        elif closed == "Table":
            table = None
        piece = event.get("Text", event.get("Code")) if isinstance(event, dict) else None
        for outer in open_links:
            _widen(outer, start, end)
            if isinstance(piece, str):
                outer.plain += piece
    return found


def _widen(link: _Link, start: int, end: int) -> None:
    link.inner_start = start if link.inner_start < 0 else min(link.inner_start, start)
    link.inner_end = max(link.inner_end, end)


@dataclass(frozen=True)
class _Edit:
    """A source edit: ``text`` replaces the byte range; with a ``note`` (what a link in a
    table points to), followed by the note's number, the note listed after the table."""

    start: int
    end: int
    text: str
    note: str = ""


def _rewrite(link: _Link, raw: bytes) -> _Edit | None:
    """The source edit that keeps the link's target readable."""
    inner = raw[link.inner_start : link.inner_end].decode() if link.inner_start >= 0 else ""
    label = link.plain.strip()
    marker = RENDER_CONFIG.markdown_symbol.image if link.image else ""
    text_at = link.start + (2 if link.image else 1)  # after "[" or "!["
    if link.kind in ("Autolink", "Email") and label:
        return None  # the text is the address already
    if web_url(link.url) is not None:
        if not label:  # nothing to click: the address becomes the text
            return _Edit(text_at, text_at, _escaped(link.url))
        if link.in_table and label != link.url:  # a table is a code block: no link in it
            return _Edit(link.end, link.end, "", note=_escaped(link.url))
        return None
    if not link.url or link.url.startswith("#"):  # an anchor: only the text means something
        return _Edit(link.start, link.end, f"{marker}{inner}")
    # a path (or a footnote's text): shown, as code where code can be shown
    if not label or label == link.url or link.url.endswith(f"/{label}"):
        path = _escaped(link.url) if link.in_table else code_span(link.url)
        return _Edit(link.start, link.end, f"{marker}{path}")
    if link.in_table:
        return _Edit(link.start, link.end, f"{marker}{inner}", note=code_span(link.url))
    return _Edit(link.start, link.end, f"{marker}{inner} ({code_span(link.url)})")


def _notes_at(raw: bytes, table: tuple[int, int], notes: list[str]) -> _Edit:
    """The edit that lists a table's notes after it (as ``[1] https://…`` lines), inside
    the quote or list item the table is in."""
    start, end = table
    line = raw[raw.rfind(b"\n", 0, start) + 1 : start].decode()
    prefix = "".join(c if c == ">" else " " for c in line)  # its quote marks, indentation
    lines = [f"{prefix}\\[{n}\\] {note}" for n, note in enumerate(notes, 1)]
    before = (
        prefix.rstrip() + "\n" if raw[end - 1 : end] == b"\n" else "\n" + prefix.rstrip() + "\n"
    )
    return _Edit(end, end, before + "\n".join(lines) + "\n" + prefix.rstrip() + "\n")


def readable_links(markdown: str) -> str:
    """``markdown`` with every link's target kept where Telegram would lose or refuse it.

    A ``text_link`` needs an absolute URL: Telegram refuses ``src/main.py``, ``/etc/x`` or
    ``#usage`` (and with it all of the message's formatting), so those become the text
    with the path in code (or the path alone when the text only names it; an anchor keeps
    its text). A table is sent as a code block, where links cannot be: a link in it gets a
    number, ``docs[1]``, and its URL is listed under that number after the table (written
    in the cell, it would make the column, and so the whole table, twice as wide). A link
    or image without text shows its URL.
    """
    if "[" not in markdown and "<" not in markdown:
        return markdown
    raw = markdown.encode()
    edits = [(e, link.table) for link in _links(markdown) if (e := _rewrite(link, raw))]
    if not edits:
        return markdown
    out = bytearray()
    last = 0
    notes: dict[tuple[int, int], dict[str, int]] = {}  # table -> note -> its number
    pending: list[tuple[int, int]] = []  # tables with notes not yet listed, in order
    for edit, table in sorted(edits, key=lambda e: (e[0].start, e[0].end)):
        if edit.start < last:
            continue  # inside a link already rewritten (an image in a link)
        while pending and pending[0][1] <= edit.start:
            done = pending.pop(0)
            listed = _notes_at(raw, done, list(notes[done]))
            out += raw[last : listed.start] + listed.text.encode()
            last = listed.start
        text = edit.text
        if edit.note and table is not None:
            numbers = notes.setdefault(table, {})
            if not numbers:
                pending.append(table)
            text += f"\\[{numbers.setdefault(edit.note, len(numbers) + 1)}\\]"
        out += raw[last : edit.start] + text.encode()
        last = edit.end
    for done in pending:
        listed = _notes_at(raw, done, list(notes[done]))
        out += raw[last : listed.start] + listed.text.encode()
        last = listed.start
    out += raw[last:]
    return out.decode()


def _fix_links(entities: list[TgEntity]) -> list[TgEntity]:
    """A link Telegram would refuse (one ``readable_links`` did not catch) becomes code."""
    fixed: list[TgEntity] = []
    for e in entities:
        if e.type == "text_link":
            url = web_url(e.url or "")
            e = e.copy_with(url=url) if url else e.copy_with(type="code", url=None)
        fixed.append(e)
    return fixed


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
    return str(user.id) in entries or bool(user.username and f"@{user.username.lower()}" in entries)


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
    if message.is_topic_message and message.message_thread_id is not None:
        return message.message_thread_id
    return None


def attachments(message: Message) -> tuple[Attachment, ...]:
    found: list[Attachment] = []
    if (doc := message.document) is not None:
        found.append(_file(doc, doc.file_name or f"document-{doc.file_unique_id}", doc.mime_type))
    if message.photo:
        p = _largest(message.photo)
        found.append(_file(p, f"photo-{p.file_unique_id}.jpg", "image/jpeg"))
    if (v := message.voice) is not None:
        found.append(_file(v, f"voice-{v.file_unique_id}.ogg", v.mime_type or "audio/ogg"))
    if (a := message.audio) is not None:
        found.append(_file(a, a.file_name or f"audio-{a.file_unique_id}", a.mime_type))
    if (clip := message.video) is not None:
        name = clip.file_name or f"video-{clip.file_unique_id}.mp4"
        found.append(_file(clip, name, clip.mime_type or "video/mp4"))
    if (note := message.video_note) is not None:  # a round video message
        found.append(_file(note, f"video-note-{note.file_unique_id}.mp4", "video/mp4"))
    return tuple(found)


def described(message: Message) -> str:
    """What a message that is neither text nor a file holds, as text the agent can read
    (a shared location, a place, a contact, a poll, a sticker, a dice roll); "" for none.

    Dropped, these left the person who sent one in a private chat hearing nothing at all.
    """
    if (venue := message.venue) is not None:
        where = f"{venue.location.latitude}, {venue.location.longitude}"
        return f"[Shared a place: {venue.title}, {venue.address} ({where})]"
    if (loc := message.location) is not None:
        return f"[Shared a location: {loc.latitude}, {loc.longitude}]"
    if (contact := message.contact) is not None:
        name = " ".join(n for n in (contact.first_name, contact.last_name) if n)
        return f"[Shared a contact: {name}, {contact.phone_number}]"
    if (poll := message.poll) is not None:
        options = "".join(f"\n- {option.text}" for option in poll.options)
        return f"[Poll: {poll.question}]{options}"
    if (sticker := message.sticker) is not None:
        return f"[Sticker {sticker.emoji or ''}]".replace(" ]", "]")
    if (dice := message.dice) is not None:
        return f"[Rolled {dice.emoji}: {dice.value}]"
    return ""


def _merged(first: Sequence[Attachment], more: Sequence[Attachment]) -> tuple[Attachment, ...]:
    """``first`` then the files of ``more`` that are not among them already."""
    known = {a.platform_id for a in first}
    return (*first, *(a for a in more if a.platform_id not in known))


def _file(media: Any, name: str, media_type: str | None) -> Attachment:
    """One file of a message (any of the Bot API's file objects) as an Attachment."""
    return Attachment(
        name=name, size=media.file_size, media_type=media_type, platform_id=media.file_id
    )


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
    reply = message.reply_to_message
    if reply is None or reply.forum_topic_created is not None:
        return None
    if reply.from_user is not None and reply.from_user.id == rules.bot_id and not message.quote:
        return None
    return reply


def _author(message: Message) -> str:
    if message.from_user is not None:
        return display_name(message.from_user)
    if message.sender_chat is not None:
        return message.sender_chat.effective_name or str(message.sender_chat.id)
    return "someone"


def with_reply_context(text: str, message: Message, reply: Message) -> str:
    """``text`` after the replied-to message, quoted (the part the person quoted, if any)."""
    quoted = message.quote.text if message.quote else reply.text or reply.caption or ""
    files = attachments(reply)
    head = f"In reply to {_author(reply)}" + (" (its files are attached):" if files else ":")
    lines = [head, *(f"> {line}" for line in quoted.splitlines())]
    return "\n".join(lines) + (f"\n\n{text}" if text else "")


def display_name(user: User) -> str:
    """How the chat shows a person (a message's sender, the presser of a Stop)."""
    return user.full_name or user.username or str(user.id)


def _on_behalf_of_a_chat(message: Message, rules: Rules, keyed_on: int | None) -> Ignored:
    """Ignored; told so when it was sent to the bot (a mention, a reply to it, one of its
    commands) anonymously or as a channel by someone in an allowed chat, who would
    otherwise wait for an answer. A channel's automatic forward is never told."""
    ignored = Ignored("ignored", "sent on behalf of a chat, not by a person")
    chat, user = message.chat, message.from_user
    if message.is_automatic_forward or user is None:
        return ignored
    if not rules.user_allowed(user, chat.id, chat.username, keyed_on):
        return ignored
    text = message.text or message.caption or ""
    command = _command_target(text.lstrip())
    ours = command is not None and (
        (command[1] or "").lower() == rules.bot_username.lower()
        or (command[1] is None and parse_command(command[0]) is not None)
    )
    if not (ours or _mentions_bot(message, rules) or _replies_to_bot(message, rules)):
        return ignored
    target: dict[str, int | bool | str] = {"chat_id": chat.id, "message_id": message.message_id}
    topic = topic_id(message)
    if topic is not None:
        target["thread_id"] = topic
    if chat.type in SHARED_CHAT_TYPES:
        target["shared"] = True
    return dataclasses.replace(ignored, tell=ANONYMOUS_TEXT, target=target)


def album_of(message: Message) -> str | None:
    """The album (media group) a message is one part of, as ``chat:media_group_id``."""
    group = message.media_group_id
    return f"{message.chat.id}:{group}" if group else None


def to_inbound(
    update_id: int,
    message: Message,
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
    if message.sender_chat is not None or message.is_automatic_forward:
        # a channel's post copied into its discussion group (from "Telegram", 777000, not a
        # bot), or a message sent as a channel or anonymously as the group (from Telegram's
        # stand-in bots): no person to answer, to bind buttons to, or to count a run against
        return _on_behalf_of_a_chat(message, rules, keyed_on)
    user = message.from_user
    if user is None or user.is_bot:
        return Ignored("ignored", "sent by a bot")
    chat = message.chat
    first = chat.id if keyed_on is None else keyed_on
    if not rules.user_allowed(user, chat.id, chat.username, keyed_on):
        return Ignored("denied", f"user {user.id} in chat {chat.id} is not on the allowlist")
    text = message.text or message.caption or described(message)
    files = attachments(message)
    if not text.strip() and not files:
        return Ignored("ignored", "no text and no file (a service message)")
    shared = chat.type in SHARED_CHAT_TYPES
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
    target: dict[str, int | bool | str] = {"chat_id": chat.id, "message_id": message.message_id}
    if topic is not None:
        target["thread_id"] = topic
    if shared:
        target["shared"] = True
    if chat.username:  # a public chat: its links (t.me/<name>/<message>) carry this, no id
        target["chat_username"] = chat.username.lower()
    return Inbound(
        platform="telegram",
        event_id=f"{rules.bot_id}:{update_id}",
        thread_key=thread_key(first, topic),
        sender_id=str(user.id),
        sender_name=display_name(user),
        text=text,
        attachments=files,
        shared_chat=shared,
        is_operator=rules.is_operator(user),
        target=dict(target),
        part_of=album,
    )
