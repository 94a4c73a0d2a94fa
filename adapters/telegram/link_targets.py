"""Link targets kept readable and acceptable to Telegram (Markdown in, entities out).

Telegram refuses a whole message's entities for one ``text_link`` it does not accept (a
relative path, an anchor, a host-less URL), and the surface then sends the answer
unformatted; a coding agent links files constantly. So before conversion a link to a path
or anchor becomes the path in code, a link in a table (sent as a code block) gets a number
and its URL is listed after the table, a link without text shows its URL; after
conversion any ``text_link`` still refused becomes code. Its own module: one parse of the
source with its own bookkeeping (links, their text, their tables), apart from
:mod:`.render`'s converting and splitting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pyromark
import telegramify_markdown

from bridge.markdown import PARSE_OPTIONS, code_span

# what a text_link may point to: Telegram refuses a URL without a host ("URL host is empty")
WEB_URL = re.compile(r"(?i)(?:https?://[^\s/?#]|tg://|mailto:)")
EMAIL = re.compile(r"[^\s@/:<>()]+@[^\s@/:<>()]+\.[^\s@/:<>()]+")
INLINE_SYNTAX = frozenset("\\`*_[]<>&~$|!")  # escaped where a URL is written as text
TgEntity = telegramify_markdown.MessageEntity


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


def _rewrite(link: _Link, raw: bytes, image_marker: str) -> _Edit | None:
    """The source edit that keeps the link's target readable (``image_marker``: what the
    converter shows for an image)."""
    inner = raw[link.inner_start : link.inner_end].decode() if link.inner_start >= 0 else ""
    label = link.plain.strip()
    marker = image_marker if link.image else ""
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


def readable_links(markdown: str, image_marker: str) -> str:
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
    rewrites = ((_rewrite(link, raw, image_marker), link.table) for link in _links(markdown))
    edits = [(e, table) for e, table in rewrites if e]
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


def fix_links(entities: list[TgEntity]) -> list[TgEntity]:
    """A link Telegram would refuse (one ``readable_links`` did not catch) becomes code."""
    fixed: list[TgEntity] = []
    for e in entities:
        if e.type == "text_link":
            url = web_url(e.url or "")
            e = e.copy_with(url=url) if url else e.copy_with(type="code", url=None)
        fixed.append(e)
    return fixed
