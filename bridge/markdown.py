"""Splitting a Markdown answer to a surface's length limit without breaking its blocks.

markdown-it-py parses the answer (rather than hand-rolled fence counting) and gives each
top-level block its source lines, so parts are cut at paragraph, list or code-block
boundaries; a code block longer than a whole message is split into several fenced blocks,
each closed and reopened with the same fence and language, never cut open. A table longer
than a message repeats its header rows at the top of each part, or the rows that follow
would read as bare text.

A list or quote longer than a message is cut between its lines. A part is read on its own,
so its start must mean what it meant in place: a code block a cut falls in is closed before
the cut and reopened after it as a real fence (indented four spaces it would be an indented
code block showing its backticks), keeping only the quote marks; an item nested in a list
gets its ancestors back as ``…`` items, or it would read as a top-level item, with a blank
line after one whose next line starts an item numbered other than 1 (which cannot interrupt
the ``…`` and would read as its text, the code under it as indented code). A code block is
opened only with room for its closing line. Every part is within the limit, whatever the
nesting: where the ancestors alone would nearly fill a part they are left out, and a block
no cut can bring under the limit is cut as text.

A paragraph longer than a message is cut at a space outside links, emphasis, code spans and
HTML tags (a cut inside one shows its markers as text on both sides), and never before text
that would start a list, heading or quote at the top of the next part; a hard cut is left
for a span longer than a whole message.

Each part is rendered on its own, so a reference link (``[the docs][1]``, with
``[1]: https://...`` at the end, as models write citations) would work only in the part
holding its definition: top-level definitions are taken out and each part gets back the ones
its links use, with room kept for them.

:func:`code_span` and :func:`fence_for` wrap text the gateway shows verbatim (a tool's name,
a preview of what a tool will do) so that its own backticks cannot close the wrapper.
"""

from __future__ import annotations

import bisect
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.common.utils import normalizeReference
from markdown_it.token import Token

log = logging.getLogger(__name__)

_md = MarkdownIt("commonmark").enable("table")

_CONTAINERS = frozenset({"bullet_list_open", "ordered_list_open", "blockquote_open"})
_QUOTES = re.compile(r"(?:[ ]{0,3}>[ ]?)*")
_ITEM_MARK = re.compile(r"((?:[ ]{0,3}>[ ]?)*)([ ]*(?:[-+*]|[0-9]{1,9}[.)]))(?=[ ]|$)")
_CONT = re.compile(r"((?:[ ]{0,3}>[ ]?)*)([ ]*(?:(?:[-+*]|[0-9]{1,9}[.)])(?:[ ]+|$))?)")
# what would start a block of its own at the top of a part (not a paragraph's text)
_BLOCK_START = re.compile(
    r"(?:[-+*](?:[ \t]|$)|#{1,6}(?:[ \t]|$)|>|[0-9]{1,9}[.)](?:[ \t]|$)|`{3}|~{3}|=+[ \t]*$"
    r"|-+[ \t]*$|<|\|)"
)
_MIN_ROOM = 16  # the least room a line of a list or quote is cut to (before its prefixes)
# what may be a link's label: a bracketed run without unescaped brackets
_LABEL = re.compile(r"\[((?:[^\[\]\\]|\\.){1,999})\]")
_MIN_PART = 64  # the least limit a part is cut to
DEFINITIONS_SHARE = 4  # link definitions repeated on each part take at most 1/4 of it
_TAG = re.compile(r"<[A-Za-z/!?][^<>]{0,2000}>")
_BACKTICKS = re.compile(r"`+")


def code_span(text: str) -> str:
    """``text`` as an inline code span whose own backticks cannot end it (CommonMark: a span
    ends at a run of exactly as many backticks as opened it)."""
    text = " ".join(str(text).splitlines()) or " "
    ticks = "`" * (max((len(r) for r in _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def fence_for(text: str) -> str:
    """A backtick fence longer than any backtick run in ``text`` (at least three), so no line
    of it can close the block (a closing fence is at least as long as the opening one)."""
    return "`" * max(3, max((len(r) for r in _BACKTICKS.findall(text)), default=0) + 1)


@dataclass(frozen=True)
class _Fence:
    """A code block inside a list or quote: its lines relative to the block's first line."""

    start: int  # the opening line
    end: int  # one past the closing line (or past the last line when never closed)
    markup: str  # ``` or ~~~ (as long as the opener's)
    info: str


@dataclass(frozen=True)
class _Item:
    """A list item inside a list or quote: its lines, and how its marker line begins."""

    start: int
    end: int
    stub: str  # its quote marks, indentation and marker, followed by an ellipsis


@dataclass(frozen=True)
class _Block:
    source: str
    kind: str = "text"  # fence, container, table, code or text
    info: str = ""
    code: str = ""  # a fence's code as CommonMark reads it (its indentation taken off)
    markup: str = ""  # a fence's opening run of backticks or tildes
    fences: tuple[_Fence, ...] = ()  # code blocks nested inside it
    items: tuple[_Item, ...] = ()  # list items nested inside it


def _within(
    tokens: list[Token], starts: list[int], start: int, end: int
) -> Iterator[tuple[Token, tuple[int, int]]]:
    """The ``tokens`` (sorted by their first line, ``starts``) that lie in lines
    ``start:end``: found by bisection, so each token is looked at for one block only."""
    for tok in tokens[bisect.bisect_left(starts, start) : bisect.bisect_left(starts, end)]:
        if tok.map is not None and tok.map[1] <= end:
            yield tok, (tok.map[0], tok.map[1])


def _blocks(text: str) -> list[_Block]:
    """Top-level blocks, each with the code blocks and list items nested in it."""
    lines = text.split("\n")
    tokens = _md.parse(text)
    # in document order, so sorted by their first line
    nested = [t for t in tokens if t.type == "fence" and t.level > 0 and t.map is not None]
    nested_at = [t.map[0] for t in nested if t.map is not None]
    list_items = [t for t in tokens if t.type == "list_item_open" and t.map is not None]
    items_at = [t.map[0] for t in list_items if t.map is not None]
    blocks: list[_Block] = []
    last_end = 0
    for tok in tokens:
        if tok.level != 0 or tok.map is None or tok.nesting == -1:
            continue
        start, end = tok.map
        if start < last_end:
            continue
        if start > last_end:  # blank lines between blocks
            gap = "\n".join(lines[last_end:start])
            if gap.strip():
                blocks.append(_Block(gap))
        source = "\n".join(lines[start:end])
        if tok.type == "fence":
            blocks.append(_Block(source, "fence", tok.info, tok.content, tok.markup))
        elif tok.type in _CONTAINERS:
            fences = tuple(
                _Fence(a - start, b - start, f.markup, f.info)
                for f, (a, b) in _within(nested, nested_at, start, end)
            )
            items = []
            for _, (a, b) in _within(list_items, items_at, start, end):
                mark = _ITEM_MARK.match(lines[a])
                if mark:
                    items.append(_Item(a - start, b - start, mark.group(1) + mark.group(2) + " …"))
            blocks.append(_Block(source, "container", fences=fences, items=tuple(items)))
        elif tok.type == "table_open":
            blocks.append(_Block(source, "table"))
        elif tok.type == "code_block":
            blocks.append(_Block(source, "code"))
        else:
            blocks.append(_Block(source))
        last_end = end
    if last_end < len(lines):
        rest = "\n".join(lines[last_end:])
        if rest.strip():
            blocks.append(_Block(rest))
    return blocks


# -- inline spans -----------------------------------------------------------------------------


def _pairs(text: str, code: list[tuple[int, int]], open_: str, close: str) -> dict[int, int]:
    """Matching ``open_``/``close`` characters outside code spans and escapes."""
    found: dict[int, int] = {}
    stack: list[int] = []
    k = 0
    i = 0
    while i < len(text):
        while k < len(code) and code[k][1] <= i:
            k += 1
        if k < len(code) and code[k][0] <= i:
            i = code[k][1]
            continue
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == open_:
            stack.append(i)
        elif ch == close and stack:
            found[stack.pop()] = i
        i += 1
    return found


def _spans(text: str) -> list[tuple[int, int]]:
    """Where in ``text`` inline constructs lie (code spans, links, emphasis, HTML tags): a
    cut inside one of these would show its markers as literal text. Found the way CommonMark
    reads them, closely enough: a span missed costs a marker shown, one too many a cut
    placed earlier."""
    spans: list[tuple[int, int]] = []
    # code spans first: nothing inside one is markup
    code: list[tuple[int, int]] = []
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(text)]
    j = 0
    while j < len(runs):
        start, end = runs[j]
        if start > 0 and text[start - 1] == "\\":
            j += 1
            continue
        n = end - start
        close = next((k for k in range(j + 1, len(runs)) if runs[k][1] - runs[k][0] == n), None)
        if close is None:
            j += 1
            continue
        code.append((start, runs[close][1]))
        j = close + 1
    spans += code

    def in_code(pos: int) -> bool:
        k = bisect.bisect_right(code, (pos, len(text) + 1)) - 1
        return k >= 0 and code[k][0] <= pos < code[k][1]

    spans += [(m.start(), m.end()) for m in _TAG.finditer(text) if not in_code(m.start())]
    brackets = _pairs(text, code, "[", "]")
    parens = _pairs(text, code, "(", ")")
    for open_, close_ in brackets.items():
        start = open_ - 1 if open_ > 0 and text[open_ - 1] == "!" else open_
        end = close_ + 1
        if end < len(text) and text[end] == "(" and end in parens:
            end = parens[end] + 1
        elif end < len(text) and text[end] == "[" and end in brackets:
            end = brackets[end] + 1
        spans.append((start, end))
    # emphasis: a run that can open, up to the next run of the same marker that can close
    # the openers still open, in order, and the same by (marker, run length): a closer
    # takes the latest opener of its kind and ends the openers opened after it
    openers: list[tuple[tuple[str, int], int]] = []
    by_kind: dict[tuple[str, int], list[int]] = {}
    for m in re.finditer(r"\*+|_+|~+", text):
        start, end = m.start(), m.end()
        if in_code(start) or (start > 0 and text[start - 1] == "\\"):
            continue
        before = text[start - 1] if start > 0 else " "
        after = text[end] if end < len(text) else " "
        kind = (text[start], end - start)
        can_open = not after.isspace()
        can_close = not before.isspace()
        if kind[0] == "_":
            can_open = can_open and not before.isalnum()
            can_close = can_close and not after.isalnum()
        if can_close and by_kind.get(kind):
            opened = by_kind[kind][-1]
            spans.append((opened, end))
            while openers and openers[-1][1] >= opened:
                by_kind[openers.pop()[0]].pop()
            can_open = False
        if can_open:
            openers.append((kind, start))
            by_kind.setdefault(kind, []).append(start)
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _inside(spans: list[tuple[int, int]], starts: list[int], pos: int) -> bool:
    k = bisect.bisect_right(starts, pos) - 1
    return k >= 0 and spans[k][0] < pos < spans[k][1]


def _cut(text: str, base: int, limit: int, spans: list[tuple[int, int]], starts: list[int]) -> int:
    """Where to cut ``text[base:]`` so the part before is at most ``limit`` characters: a
    line break in the second half, else the last space, all outside inline spans and not
    before a block start; else the last space at all (a span longer than a message); else
    ``limit`` characters in."""
    top = min(base + limit, len(text) - 1)
    head = text[base : top + 1]
    first = base + len(head) - len(head.lstrip())  # no cut before the part has text
    best = -1
    any_space = -1
    for p in range(top, first, -1):
        if text[p] not in " \n":
            continue
        if any_space < 0:
            any_space = p
        if best >= 0 and p - base < limit // 2:
            break  # no line break in the second half: the last space it is
        if _inside(spans, starts, p):
            continue
        rest = text[p : p + 64].lstrip(" \n")[:16]
        if not rest or _BLOCK_START.match(rest):
            continue
        if text[p] == "\n" and p - base >= limit // 2:
            return p
        if best < 0:
            best = p
    if best >= 0:
        return best
    if any_space > base:
        return any_space
    return base + limit


def _hard_split(text: str, limit: int) -> list[str]:
    """Split a paragraph (or other run of text) at spaces or line breaks outside inline
    spans, each part at most ``limit`` characters."""
    spans = _spans(text)
    starts = [s for s, _ in spans]
    parts = []
    base = 0
    while len(text) - base > limit:
        cut = _cut(text, base, limit, spans, starts)
        piece = text[base:cut].rstrip()
        if piece:
            parts.append(piece)
        base = cut
        while base < len(text) and text[base] in " \n":
            base += 1
    if text[base:].strip():
        parts.append(text[base:])
    return parts


# -- blocks -----------------------------------------------------------------------------------


def _split_lines(
    source: str, limit: int, head: list[str] | None = None, *, code: bool = False
) -> list[str]:
    """Whole lines packed into parts, each starting with ``head`` (a table's header rows);
    lines are kept as they are (an indented code block keeps its indentation). A line of
    ``code`` longer than a part is cut into pieces that each keep its indentation: cut as
    text, the pieces after the first would be a paragraph (its ``*`` read as emphasis) that
    took the code lines under it in as more of its text."""
    head = head or []
    room = limit - sum(len(h) + 1 for h in head)
    parts: list[str] = []
    chunk: list[str] = []
    size = 0
    for line in source.split("\n"):
        if len(line) <= room:
            pieces = [line]
        elif code:
            body = line.lstrip(" \t")
            indent = line[: len(line) - len(body)]
            step = max(room - len(indent), 1)
            pieces = [indent + body[i : i + step] for i in range(0, len(body), step)]
        else:
            pieces = _hard_split(line, room)
        for piece in pieces:
            if chunk and size + len(piece) + 1 > room:
                parts.append("\n".join([*head, *chunk]).rstrip())
                chunk, size = [], 0
            if not chunk and not piece.strip():
                continue
            chunk.append(piece)
            size += len(piece) + 1
    if chunk:
        parts.append("\n".join([*head, *chunk]).rstrip())
    return parts


def _split_table(source: str, limit: int) -> list[str]:
    """A table cut between its rows, its header and separator rows repeated on each part."""
    lines = source.split("\n")
    head = lines[:2]
    if len(lines) < 3 or sum(len(h) + 1 for h in head) > limit // 2:
        return _split_lines(source, limit)
    return _split_lines("\n".join(lines[2:]), limit, head)


@dataclass(frozen=True)
class _FenceForm:
    """How a nested code block's lines are written in place and when reopened on a part
    of its own (only its quote marks kept: indented four spaces it would not be a fence)."""

    quotes: str
    indent: int

    @property
    def nested(self) -> str:
        return self.quotes + " " * self.indent

    def content(self, line: str) -> str:
        """A line of the block without its quote marks and indentation."""
        n = self.quotes.count(">")
        m = re.match(rf"(?:[ ]{{0,3}}>[ ]?){{{n}}}", line) if n else None
        rest = line[m.end() :] if m else line
        strip = len(rest) - len(rest.lstrip(" "))
        return rest[min(strip, self.indent) :]


def _form(lines: list[str], f: _Fence) -> _FenceForm:
    opener = lines[f.start]
    at = opener.find(f.markup)
    prefix = opener[:at] if at >= 0 else ""
    quotes = _QUOTES.match(prefix)
    q = quotes.group(0) if quotes else ""
    return _FenceForm(q, len(prefix) - len(q))


def _quoted(line: str) -> int:
    """Where ``line`` goes on after its quote marks."""
    quotes = _QUOTES.match(line)
    return quotes.end() if quotes else 0


def _fence_room(form: _FenceForm, f: _Fence, limit: int) -> int:
    """How long a piece of a nested code block's line may be: it fits a part of its own
    with the reopening line and the closing one."""
    reopen = len(form.quotes) + len(f.markup) + len(f.info)
    return max(limit - reopen - 2 * len(form.quotes) - len(f.markup) - 3, 1)


def _lead(stubs: list[str], line: str) -> list[str]:
    """``stubs`` to put above ``line``, with a blank line (keeping the stub's quote marks)
    before a stub or line that starts an ordered item not numbered 1, or an empty item:
    neither can interrupt a paragraph (CommonMark), so right under a ``…`` it would read as
    more of that text, and what it holds (a code block) as text or indented code."""
    lead: list[str] = []
    for stub, after in zip(stubs, [*stubs[1:], line][: len(stubs)], strict=True):
        lead.append(stub)
        mark = _ITEM_MARK.match(after)
        if mark is None:
            continue
        number = mark.group(2).strip()[:-1]
        if (number and int(number) != 1) or not after[mark.end() :].strip():
            quotes = _QUOTES.match(stub)
            lead.append(quotes.group(0).rstrip() if quotes else "")
    return lead


def _split_container(block: _Block, limit: int) -> list[str]:
    """A list or quote longer than ``limit``, cut between its lines.

    A cut inside a nested code block closes it at the end of the part and reopens it at the
    start of the next as a fence with only its quote marks (its lines de-indented alike)
    until it closes; a part that opens a code block keeps room for its closing line. A part
    that starts inside a nested list item (or goes on after such a reopened block) first
    gets the item's ancestors as ``…`` items, so it keeps its depth, unless they would leave
    too little room for the line (nesting that deep is not kept across a cut).
    """
    lines = block.source.split("\n")
    role: dict[int, tuple[bool, _Fence, _FenceForm]] = {}  # line -> (is the closer, ...)
    # opener line -> room for its closer, for its first line; the block, its form
    opens: dict[int, tuple[int, int, _Fence, _FenceForm]] = {}
    for f in block.fences:
        form = _form(lines, f)
        last = f.end - 1
        closer = form.content(lines[last]).strip() if last > f.start else ""
        closed = bool(re.fullmatch(re.escape(f.markup[0]) + f"{{{len(f.markup)},}}", closer))
        for i in range(f.start + 1, f.end):
            role[i] = (closed and i == last, f, form)
        room = _fence_room(form, f, limit)
        closing = len(form.nested) + len(f.markup) + 1
        first = 0  # an empty block has no first line to keep its opener company
        if last > f.start:
            first = len(form.nested) + min(len(form.content(lines[f.start + 1])), room) + 1
        opens[f.start] = (closing, first, f, form)

    items = block.items  # by their first line
    open_items: list[_Item] = []  # the items line ``i`` is in: its ancestors, outermost first
    seen = 0  # items[:seen] have started

    def stubs(i: int, own: bool) -> list[str]:
        """The stubs of the items around line ``i`` (and of those starting on it when
        ``own``); asked for lines in order, so each item is added and dropped once."""
        nonlocal seen
        while seen < len(items) and items[seen].start <= i:
            open_items.append(items[seen])
            seen += 1
        open_items[:] = [it for it in open_items if i < it.end]
        return [it.stub for it in open_items if it.start < i or (own and it.start == i)]

    parts: list[str] = []
    chunk: list[str] = []
    size = 0  # the part's length once joined, plus one: at most ``limit`` (one to spare)
    flat: _Fence | None = None  # the code block this part reopened de-indented
    fresh = False  # the next line begins a context of its own (after such a block)

    def push() -> None:
        nonlocal chunk, size
        if "\n".join(chunk).strip():
            parts.append("\n".join(chunk).rstrip())
        chunk, size = [], 0

    def add(line: str) -> None:
        nonlocal size
        chunk.append(line)
        size += len(line) + 1

    for i, line in enumerate(lines):
        fence = role.get(i)
        if fence is not None:
            is_closer, f, form = fence
            prefix = form.quotes if flat is f else form.nested
            if is_closer:  # room for it was kept (a longer closing fence means the same)
                add(prefix + f.markup)
                if flat is f:
                    flat, fresh = None, True
                continue
            body = form.content(line)
            reopen = form.quotes + f.markup + f.info
            room = _fence_room(form, f, limit)
            for piece in [body[j : j + room] for j in range(0, len(body), room)] or [""]:
                closing = len(prefix) + len(f.markup) + 1
                if chunk and size + len(prefix) + len(piece) + 1 + closing > limit:
                    add(prefix + f.markup)
                    push()
                    flat, prefix = f, form.quotes
                    add(reopen)
                add(prefix + piece)
            continue
        if not line.strip():
            if chunk and size + len(line) + 1 > limit:
                push()
            elif chunk:
                add(line)
            continue
        opener = opens.get(i)
        closing, first = opener[:2] if opener else (0, 0)  # room for its closer, first line
        context = sum(len(s) + 1 for s in _lead(stubs(i, True), line))
        cont = _CONT.match(line)
        cont_prefix = (cont.group(1) + " " * len(cont.group(2))) if cont else ""
        if limit - context - len(cont_prefix) - closing - 1 < _MIN_ROOM:
            context = 0  # ancestors this deep leave no room: a part starts without them
        if limit - context - len(cont_prefix) - closing - 1 < _MIN_ROOM and cont:
            cont_prefix = cont.group(1)  # a lazy continuation line: its quote marks only
        room = max(limit - context - len(cont_prefix) - closing - 1, _MIN_ROOM)
        if opener and len(line) > room:  # too deep to open here: reopened on a part's start
            push()
            _, _, flat, form = opener
            add(form.quotes + flat.markup + flat.info)
            continue
        pieces = [line] if len(line) <= room else _hard_split(line, room)
        for k, piece in enumerate(pieces):
            text = piece if k == 0 else cont_prefix + piece.lstrip(" ")
            # an opener goes to the next part if its first line would not follow it here
            if chunk and size + len(text) + 1 + closing + first > limit:
                push()
            if not chunk or fresh:
                lead = _lead(stubs(i, k > 0), text) if context else []
                if not lead:
                    text = text.lstrip(" ")
                if (
                    not lead
                    and opener
                    and k == 0
                    and (text != piece or text[_quoted(text) :][:1] == " ")
                ):
                    # its indentation (and item marker) would not hold without its context:
                    # reopened as a fence (indented, it would read as indented code)
                    _, _, flat, form = opener
                    text = form.quotes + flat.markup + flat.info
                if chunk and size + len(text) + 1 + closing + sum(len(s) + 1 for s in lead) > limit:
                    push()
                for s in lead:
                    add(s)
                fresh = False
            add(text)
    push()
    return parts


def _reopen_markup(markup: str, code: list[str]) -> str:
    """The fence to write a top-level code block with, on parts of its own: its own, made
    longer than any run of its character that starts a line of ``code`` (taken out of an
    indented fence, a line that was code could otherwise read as the closing fence)."""
    mark = markup[:1] or "`"
    runs = (len(line) - len(line.lstrip(mark)) for line in (c.lstrip(" ") for c in code))
    return mark * max(len(markup), 3, max(runs, default=0) + 1)


def _split_fence(code: str, markup: str, info: str, limit: int) -> list[str]:
    """A top-level code block cut between its lines, each part closed and reopened.

    ``code`` is what CommonMark reads in the block (its lines with the opener's indentation
    taken off, no closing line), not the source lines: an indented fence's code would move
    right in every part, and the last line of a block never closed (an answer cut off) that
    looked like a fence would be taken for its closing line and lost."""
    lines = code.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    fence = _reopen_markup(markup, lines)
    head, tail = f"{fence}{info}", fence
    room = max(limit - len(head) - len(tail) - 2, 16)
    parts: list[str] = []
    chunk: list[str] = []
    size = 0
    for line in lines:
        pieces = [line[i : i + room] for i in range(0, len(line), room)] or [""]
        for piece in pieces:
            if chunk and size + len(piece) + 1 > room:
                parts.append("\n".join([head, *chunk, tail]))
                chunk, size = [], 0
            chunk.append(piece)
            size += len(piece) + 1
    parts.append("\n".join([head, *chunk, tail]))
    return parts


# -- link reference definitions ----------------------------------------------------------------


@dataclass(frozen=True)
class _Definition:
    """A top-level link reference definition (``[label]: url "title"``), as written."""

    key: str  # its label as CommonMark matches it
    source: str


def _definitions(text: str) -> tuple[str, list[_Definition]]:
    """``text`` with its top-level link reference definitions blanked out, and those
    definitions. A part is rendered on its own, so a reference link (``[docs][1]``) works
    only in the part that holds its definition: each part gets the ones it uses back (see
    :func:`_with_definitions`). One inside a list or quote stays where it is."""
    if "]:" not in text:  # no definition (the parse below takes as long as the split)
        return text, []
    env: dict[str, Any] = {}
    tokens = _md.parse(text, env)
    references = env.get("references") or {}
    if not references:
        return text, []
    blocks = sorted(t.map for t in tokens if t.level == 0 and t.map is not None)
    starts = [b[0] for b in blocks]
    lines = text.split("\n")
    found: list[_Definition] = []
    for key, ref in references.items():
        where = ref.get("map")
        if not where:
            continue
        start, end = where
        k = bisect.bisect_right(starts, start) - 1
        if k >= 0 and blocks[k][0] <= start < blocks[k][1]:
            continue  # inside a list or quote
        found.append(_Definition(key, "\n".join(lines[start:end])))
        lines[start:end] = [""] * (end - start)  # blank lines: nothing around them changes
    return "\n".join(lines).strip("\n"), found


def _with_definitions(part: str, definitions: list[_Definition]) -> str:
    """``part`` followed by the definitions its brackets may use (one too many is harmless:
    a definition shows nothing), unless the part would take them in (an unclosed code
    block at its end)."""
    labels = {normalizeReference(m.group(1)) for m in _LABEL.finditer(part)}
    used = [d.source for d in definitions if d.key in labels]
    if not used:
        return part
    notes = "\n".join(used)
    whole = f"{part}\n\n{notes}"
    first = part.count("\n") + 2  # the line the definitions start on
    if any(t.map is not None and t.map[1] > first for t in _md.parse(whole)):
        return part
    return whole


def closed(text: str) -> str:
    """``text`` with a code block it leaves open at its end closed: whatever follows it (the
    run's summary line) would otherwise read as more code. A model cut off by its token
    limit stops mid-block."""
    blocks = _blocks(text.rstrip("\n"))
    if not blocks or blocks[-1].kind != "fence":
        return text
    last = blocks[-1]
    lines = last.source.split("\n")
    tail = lines[-1].strip() if len(lines) > 1 else ""
    char = last.markup[:1]
    if tail and set(tail) == {char} and len(tail) >= len(last.markup):
        return text  # it has its closing fence
    return text.rstrip("\n") + "\n" + last.markup


def split_markdown(text: str, limit: int) -> list[str]:
    """Parts of at most ``limit`` characters, cut between blocks, code blocks kept whole;
    each with the link reference definitions its links use."""
    if limit < _MIN_PART:
        raise ValueError(f"limit must be at least {_MIN_PART} characters")
    # one kind of line break: markdown-it also breaks lines at a lone "\r", str.split won't
    text = text.replace("\r\n", "\n").replace("\r", "\n").strip("\n")
    if len(text) <= limit:
        return [text] if text else []
    rest, definitions = _definitions(text)
    room = limit - sum(len(d.source) + 1 for d in definitions) - 1  # "\n\n" and the lines
    if not definitions or room < max(_MIN_PART, limit - limit // DEFINITIONS_SHARE):
        # more definitions than a part can carry (or none): left where they were
        if definitions:
            log.debug("%d link definitions left in place: too long to repeat", len(definitions))
        return _split(text, limit)
    return [_with_definitions(part, definitions) for part in _split(rest, room)]


def _split(text: str, limit: int) -> list[str]:
    if len(text) <= limit:
        return [text] if text else []
    parts: list[str] = []
    current: list[str] = []  # the pieces of the part being filled, joined when it is full
    size = -2  # the length of that part, once joined
    for block in _blocks(text):
        source = block.source
        if len(source) <= limit:
            pieces = [source]
        elif block.kind == "fence":
            pieces = _split_fence(block.code, block.markup, block.info, limit)
        elif block.kind == "container":
            pieces = _split_container(block, limit)
        elif block.kind == "table":
            pieces = _split_table(source, limit)
        elif block.kind == "code":
            pieces = _split_lines(source, limit, code=True)
        else:
            pieces = _hard_split(source, limit)
        if any(len(piece) > limit for piece in pieces):
            # a block no cut above could bring under the limit (nesting or an info string
            # longer than a part): cut as text, its markup shown rather than a part refused
            log.debug("a %s block of %d characters is cut as plain text", block.kind, len(source))
            pieces = [
                cut
                for piece in pieces
                for cut in ([piece] if len(piece) <= limit else _hard_split(piece, limit))
            ]
        for piece in pieces:
            if current and size + 2 + len(piece) > limit:
                parts.append("\n\n".join(current))
                current, size = [], -2
            current.append(piece)
            size += 2 + len(piece)
    if current:
        parts.append("\n\n".join(current))
    return parts
