"""Cutting a list or quote longer than a part between its lines.

A part is read on its own, so its start must mean what it meant in place: a code block a
cut falls in is closed before the cut and reopened after it as a real fence (indented four
spaces it would be an indented code block showing its backticks), keeping only the quote
marks; an item nested in a list gets its ancestors back as ``…`` items, or it would read as
a top-level item, with a blank line after one whose next line starts an item numbered other
than 1 (which cannot interrupt the ``…`` and would read as its text, the code under it as
indented code). A code block is opened only with room for its closing line. Every part is
within the limit, whatever the nesting: where the ancestors alone would nearly fill a part
they are left out. Lengths are in the surface's unit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .blocks import LineSpans
from .inline import hard_split
from .tree import Block, Fence, Item, numbered
from .units import Ruler

_QUOTES = re.compile(r"(?:[ ]{0,3}>[ ]?)*")
_ITEM_MARK = re.compile(r"((?:[ ]{0,3}>[ ]?)*)([ ]*(?:[-+*]|[0-9]{1,9}[.)]))(?=[ ]|$)")
_CONT = re.compile(r"((?:[ ]{0,3}>[ ]?)*)([ ]*(?:(?:[-+*]|[0-9]{1,9}[.)])(?:[ ]+|$))?)")
_MIN_ROOM = 16  # the least room a line of a list or quote is cut to (before its prefixes)


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


def _form(lines: list[str], f: Fence) -> _FenceForm:
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


def _fence_room(form: _FenceForm, f: Fence, limit: int, ruler: Ruler) -> int:
    """How long a piece of a nested code block's line may be: it fits a part of its own
    with the reopening line and the closing one."""
    reopen = len(form.quotes) + len(f.markup) + ruler.len(f.info)
    return max(limit - reopen - 2 * len(form.quotes) - len(f.markup) - 3, 1)


def _lead(stubs: list[str], line: str, item: bool) -> list[str]:
    """``stubs`` to put above ``line``, with a blank line (keeping the stub's quote marks)
    before a stub or line that starts an ordered item not numbered 1, or an empty item:
    neither can interrupt a paragraph (CommonMark), so right under a ``…`` it would read as
    more of that text, and what it holds (a code block) as text or indented code. A line
    that only looks like such an item (``item`` false: it was text, going on a paragraph
    that such a line cannot interrupt) gets none: after a blank line it would become one,
    or indented code."""
    lead: list[str] = []
    for stub, after in zip(stubs, [*stubs[1:], line][: len(stubs)], strict=True):
        lead.append(stub)
        mark = _ITEM_MARK.match(after) if after is not line or item else None
        if mark is None:
            continue
        number = mark.group(2).strip()[:-1]
        if (number and int(number) != 1) or not after[mark.end() :].strip():
            quotes = _QUOTES.match(stub)
            lead.append(quotes.group(0).rstrip() if quotes else "")
    return lead


def split_container(block: Block, limit: int, ruler: Ruler, spans: LineSpans) -> list[str]:
    """A list or quote longer than ``limit``, cut between its lines.

    A cut inside a nested code block closes it at the end of the part and reopens it at the
    start of the next as a fence with only its quote marks (its lines de-indented alike)
    until it closes; a part that opens a code block keeps room for its closing line. A part
    that starts inside a nested list item (or goes on after such a reopened block) first
    gets the item's ancestors as ``…`` items, so it keeps its depth, unless they would leave
    too little room for the line (nesting that deep is not kept across a cut).
    """
    m = ruler.len
    lines = block.source.split("\n")
    role: dict[int, tuple[bool, Fence, _FenceForm]] = {}  # line -> (is the closer, ...)
    # opener line -> room for its closer, for its first line; the block, its form
    opens: dict[int, tuple[int, int, Fence, _FenceForm]] = {}
    for f in block.fences:
        form = _form(lines, f)
        last = f.end - 1
        closer = form.content(lines[last]).strip() if last > f.start else ""
        closed = bool(re.fullmatch(re.escape(f.markup[0]) + f"{{{len(f.markup)},}}", closer))
        for i in range(f.start + 1, f.end):
            role[i] = (closed and i == last, f, form)
        room = _fence_room(form, f, limit, ruler)
        closing = len(form.nested) + len(f.markup) + 1
        first = 0  # an empty block has no first line to keep its opener company
        if last > f.start:
            first = len(form.nested) + min(m(form.content(lines[f.start + 1])), room) + 1
        opens[f.start] = (closing, first, f, form)

    items = block.items  # by their first line
    item_at = {it.start: it for it in items}
    open_items: list[Item] = []  # the items line ``i`` is in: its ancestors, outermost first
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
    flat: Fence | None = None  # the code block this part reopened de-indented
    fresh = False  # the next line begins a context of its own (after such a block)

    def push() -> None:
        nonlocal chunk, size
        if "\n".join(chunk).strip():
            parts.append("\n".join(chunk).rstrip())
        chunk, size = [], 0

    def add(line: str) -> None:
        nonlocal size
        chunk.append(line)
        size += m(line) + 1

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
            room = _fence_room(form, f, limit, ruler)
            for piece in ruler.chunks(body, room):
                closing = len(prefix) + len(f.markup) + 1
                if chunk and size + len(prefix) + m(piece) + 1 + closing > limit:
                    add(prefix + f.markup)
                    push()
                    flat, prefix = f, form.quotes
                    add(reopen)
                add(prefix + piece)
            continue
        if not line.strip():
            if chunk and size + m(line) + 1 > limit:
                push()
            elif chunk:
                add(line)
            continue
        opener = opens.get(i)
        closing, first = opener[:2] if opener else (0, 0)  # room for its closer, first line
        own = item_at.get(i)  # an item starting here: numbered as rendered atop a part
        context = sum(m(s) + 1 for s in _lead(stubs(i, True), line, own is not None))
        cont = _CONT.match(line)
        cont_prefix = (cont.group(1) + " " * len(cont.group(2))) if cont else ""
        if limit - context - len(cont_prefix) - closing - 1 < _MIN_ROOM:
            context = 0  # ancestors this deep leave no room: a part starts without them
        if limit - context - len(cont_prefix) - closing - 1 < _MIN_ROOM and cont:
            cont_prefix = cont.group(1)  # a lazy continuation line: its quote marks only
        room = max(limit - context - len(cont_prefix) - closing - 1, _MIN_ROOM)
        if opener and m(line) > room:  # too deep to open here: reopened on a part's start
            push()
            _, _, flat, form = opener
            add(form.quotes + flat.markup + flat.info)
            continue
        pieces = [line] if m(line) <= room else hard_split(line, room, ruler, spans(i))
        for k, piece in enumerate(pieces):
            text = piece if k == 0 else cont_prefix + piece.lstrip(" ")
            # an opener goes to the next part if its first line would not follow it here
            if chunk and size + m(text) + 1 + closing + first > limit:
                push()
            if not chunk or fresh:
                if k == 0 and own:
                    text = numbered(text, own.number)
                lead = _lead(stubs(i, k > 0), text, k == 0 and own is not None) if context else []
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
                lead_size = sum(m(s) + 1 for s in lead)
                if chunk and size + m(text) + 1 + closing + lead_size > limit:
                    push()
                for s in lead:
                    add(s)
                fresh = False
            add(text)
    push()
    return parts
