"""The one Markdown parser every surface's text goes through, and what the splitter reads
from its tree.

pyromark (pulldown-cmark) with the extensions telegramify-markdown renders Telegram's
messages with (tables, strikethrough, task lists, ``$math$``): the splitter, the Telegram
converter and the Slack surface all read an answer with these options, so a part is cut
where the renderer sees a block or span boundary (markdown-it-py read ``$a b$`` as text and
cut it open). The parser gives byte ranges; the splitter works in lines and characters, so
:func:`parse` turns the events into the top-level blocks (their lines), the code blocks and
list items nested in them, and the inline spans a cut must not fall in.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

import pyromark

PARSE_OPTIONS = (
    pyromark.Options.ENABLE_TABLES
    | pyromark.Options.ENABLE_STRIKETHROUGH
    | pyromark.Options.ENABLE_TASKLISTS
    | pyromark.Options.ENABLE_MATH
)
PARSER = pyromark.Markdown(options=PARSE_OPTIONS)
# for finding spans: a reference whose definition is elsewhere (taken out, or in another
# part) is still a link, not a place to cut
_SPAN_PARSER = pyromark.Markdown(options=PARSE_OPTIONS, broken_link_callback=lambda _: ("#", ""))
_SPAN_STARTS = frozenset({"Emphasis", "Strong", "Strikethrough", "Link", "Image"})
_SPAN_LEAVES = frozenset({"Code", "InlineMath", "DisplayMath", "InlineHtml"})
_CONTAINERS = frozenset({"List", "BlockQuote"})
_ITEM_MARK = re.compile(r"((?:[ ]{0,3}>[ ]?)*)([ ]*(?:[-+*]|[0-9]{1,9}[.)]))(?=[ ]|$)")
_FENCE_RUN = re.compile(r"`{3,}|~{3,}")


def name_of(tag: Any) -> str:
    """A Start or End event's tag name (``"List"`` of ``{"List": 1}``)."""
    return tag if isinstance(tag, str) else next(iter(tag), "") if isinstance(tag, dict) else ""


@dataclass(frozen=True)
class Fence:
    """A code block inside a list or quote: its lines relative to the block's first line."""

    start: int  # the opening line
    end: int  # one past the closing line (or past the last line when never closed)
    markup: str  # ``` or ~~~ (as long as the opener's)
    info: str


@dataclass(frozen=True)
class Item:
    """A list item inside a list or quote: its lines, and how its marker line begins."""

    start: int
    end: int
    stub: str  # its quote marks, indentation and marker (as numbered), and an ellipsis
    number: int | None = None  # its number as rendered (an ordered list's start, counted)


def numbered(line: str, number: int | None) -> str:
    """``line`` (an item's first line) with its marker's number as rendered: a part that
    starts a list numbers it from its first item's number, however the source numbered
    its items (``1.`` for each, as some models write; two lists a blank line apart are
    one). Written as wide as it was (``06.`` for ``10.``), or the item's content would
    move and what is nested in it with it; a number wider than written stays as written."""
    mark = _ITEM_MARK.match(line)
    if number is None or mark is None or not mark.group(2).strip()[:1].isdigit():
        return line
    at = mark.start(2) + len(mark.group(2)) - len(mark.group(2).lstrip(" "))
    digits = len(mark.group(2).strip()) - 1
    if len(str(number)) > digits:
        return line
    return f"{line[:at]}{str(number).zfill(digits)}{line[at + digits :]}"


@dataclass(frozen=True)
class Block:
    source: str
    line: int = -1  # its first line in the text parsed (-1: not a line of it)
    kind: str = "text"  # fence, container, table, code, text, or gap (between blocks)
    info: str = ""
    code: str = ""  # a fence's code as CommonMark reads it (its indentation taken off)
    markup: str = ""  # a fence's opening run of backticks or tildes
    fences: tuple[Fence, ...] = ()  # code blocks nested inside it
    items: tuple[Item, ...] = ()  # list items nested inside it


@dataclass
class Tree:
    """What the splitter reads of a text: its lines, top-level blocks and inline spans."""

    text: str
    lines: list[str]
    line_at: list[int]  # the character offset of each line
    blocks: list[Block] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)  # merged, in characters
    ends: list[int] = field(default_factory=list)  # each span's end, for bisection

    def line_spans(self, line: int, length: int | None = None) -> list[tuple[int, int]]:
        """The spans over line ``line`` (or ``length`` characters from its start),
        relative to that start and clipped to it."""
        start = self.line_at[line]
        end = start + (len(self.lines[line]) if length is None else length)
        return within(self.spans, self.ends, start, end)

    def spans_in(self, start: int, end: int) -> list[tuple[int, int]]:
        """The spans over characters ``start:end``, relative to ``start``, clipped."""
        return within(self.spans, self.ends, start, end)


def within(
    spans: list[tuple[int, int]], ends: list[int], start: int, end: int
) -> list[tuple[int, int]]:
    """The merged ``spans`` that reach into ``start:end``, relative to ``start``, clipped."""
    found = []
    for k in range(bisect.bisect_right(ends, start), len(spans)):
        a, b = spans[k]
        if a >= end:
            break
        found.append((max(a, start) - start, min(b, end) - start))
    return found


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        elif end > start:
            merged.append((start, end))
    return merged


class _Chars:
    """UTF-8 byte offsets (the parser's) to character offsets (the text's)."""

    def __init__(self, text: str) -> None:
        self._bytes: list[int] | None = None
        if not text.isascii():
            self._bytes = [0, *accumulate(len(c.encode()) for c in text)]

    def __call__(self, offset: int) -> int:
        return offset if self._bytes is None else bisect.bisect_left(self._bytes, offset)


def _events(text: str, parser: pyromark.Markdown) -> Iterator[tuple[Any, int, int]]:
    for event, where in parser.events_with_range(text):
        yield event, where["start"], where["end"]


def spans_of(text: str) -> tuple[list[tuple[int, int]], list[int]]:
    """The inline spans of ``text`` parsed on its own (a piece with no place in a tree)."""
    chars = _Chars(text)
    found = []
    for event, start, end in _events(text, _SPAN_PARSER):
        if isinstance(event, dict) and (
            name_of(event.get("Start")) in _SPAN_STARTS or _SPAN_LEAVES & event.keys()
        ):
            found.append((chars(start), chars(end)))
    spans = _merged(found)
    return spans, [b for _, b in spans]


def parse(text: str) -> Tree:
    """``text``'s top-level blocks, each with the code blocks and list items nested in it,
    and its inline spans (code, math, links, emphasis, HTML tags)."""
    lines = text.split("\n")
    line_at = [0, *accumulate(len(line) + 1 for line in lines)][:-1]
    chars = _Chars(text)
    tree = Tree(text, lines, line_at)

    def line_of(offset: int) -> int:
        return bisect.bisect_right(line_at, chars(offset)) - 1

    def lines_of(start: int, end: int) -> tuple[int, int]:
        first = line_of(start)
        last = line_of(max(end - 1, start)) + 1
        while last > first + 1 and not lines[last - 1].strip():
            last -= 1  # a list's range takes in the blank lines after it
        return first, last

    spans: list[tuple[int, int]] = []
    top: list[list[Any]] = []  # name, tag, byte range, a code block's code
    fences: list[tuple[int, int, str, str]] = []  # nested fences: lines, markup, info
    items: list[tuple[int, int, int | None]] = []  # lines, number as rendered
    lists: list[list[int | None]] = []  # the lists open: start, items so far
    code: list[str] = []  # the code of the code block being read
    depth = 0
    for event, start, end in _events(text, _SPAN_PARSER):
        if isinstance(event, str):  # a rule, a soft or hard break
            if depth == 0 and event == "Rule":
                top.append([event, event, start, end, ""])
            continue
        if "Start" in event:
            tag = event["Start"]
            name = name_of(tag)
            if depth == 0:
                top.append([name, tag, start, end, ""])
            if name in _SPAN_STARTS:
                spans.append((chars(start), chars(end)))
            elif name == "CodeBlock":
                code = []
                if depth > 0 and isinstance(tag["CodeBlock"], dict):
                    first, last = lines_of(start, end)
                    run = _FENCE_RUN.search(lines[first])
                    info = str(tag["CodeBlock"].get("Fenced", ""))
                    fences.append((first, last, run.group(0) if run else "```", info))
            elif name == "List":
                lists.append([tag["List"], 0])
            elif name == "Item":
                first_n, count = lists[-1] if lists else (None, 0)
                number = None if first_n is None else first_n + (count or 0)
                if lists:
                    lists[-1][1] = (count or 0) + 1
                items.append((*lines_of(start, end), number))
                if depth == 1:  # a top-level list ends with its last item (its own range
                    top[-1][3] = end  # runs on over link definitions after it)
            depth += 1
        elif "End" in event:
            depth -= 1
            if isinstance(event["End"], dict) and "List" in event["End"] and lists:
                lists.pop()
            if depth == 0 and name_of(event["End"]) == "CodeBlock":
                top[-1][4] = "".join(code)
        else:
            if _SPAN_LEAVES & event.keys():
                spans.append((chars(start), chars(end)))
            elif "Text" in event:
                code.append(event["Text"])
    tree.spans = _merged(spans)
    tree.ends = [b for _, b in tree.spans]
    fence_starts = [f[0] for f in fences]
    item_starts = [i[0] for i in items]
    last_end = 0
    for name, tag, b0, b1, content in top:
        start, end = lines_of(b0, b1)
        if start < last_end:
            continue
        if start > last_end:  # blank lines between blocks, or link definitions
            gap = "\n".join(lines[last_end:start])
            if gap.strip():
                tree.blocks.append(Block(gap, last_end, "gap"))
        source = "\n".join(lines[start:end])
        if name == "CodeBlock":
            fenced = isinstance(tag["CodeBlock"], dict)
            if fenced:
                run = _FENCE_RUN.search(lines[start])
                info = str(tag["CodeBlock"].get("Fenced", ""))
                markup = run.group(0) if run else "```"
                tree.blocks.append(Block(source, start, "fence", info, content, markup))
            else:
                tree.blocks.append(Block(source, start, "code"))
        elif name in _CONTAINERS:
            nested = tuple(
                Fence(a - start, b - start, markup, info)
                for a, b, markup, info in fences[
                    bisect.bisect_left(fence_starts, start) : bisect.bisect_left(fence_starts, end)
                ]
                if b <= end
            )
            found = []
            for a, b, number in items[
                bisect.bisect_left(item_starts, start) : bisect.bisect_left(item_starts, end)
            ]:
                mark = _ITEM_MARK.match(numbered(lines[a], number))
                if mark and b <= end:
                    stub = mark.group(1) + mark.group(2) + " …"
                    found.append(Item(a - start, b - start, stub, number))
            tree.blocks.append(Block(source, start, "container", fences=nested, items=tuple(found)))
        elif name == "Table":
            tree.blocks.append(Block(source, start, "table"))
        else:
            tree.blocks.append(Block(source, start))
        last_end = end
    if last_end < len(lines):
        rest = "\n".join(lines[last_end:])
        if rest.strip():
            tree.blocks.append(Block(rest, last_end, "gap"))
    return tree
