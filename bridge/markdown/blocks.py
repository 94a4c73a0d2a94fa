"""Cutting a top-level block longer than a part between its lines: a table (its header
rows repeated at the top of each part, or the rows that follow would read as bare text),
an indented code block (a cut line keeps its indentation) and a fenced code block (each
part closed and reopened with the same fence and language, never cut open)."""

from __future__ import annotations

from collections.abc import Callable

from .inline import Spans, hard_split
from .units import Ruler

LineSpans = Callable[[int], Spans | None]  # the spans of a block's line, by its number


def _none(_: int) -> Spans | None:
    return None


def split_lines(
    source: str,
    limit: int,
    ruler: Ruler,
    head: list[str] | None = None,
    *,
    code: bool = False,
    spans: LineSpans = _none,
) -> list[str]:
    """Whole lines packed into parts, each starting with ``head`` (a table's header rows);
    lines are kept as they are (an indented code block keeps its indentation). A line of
    ``code`` longer than a part is cut into pieces that each keep its indentation: cut as
    text, the pieces after the first would be a paragraph (its ``*`` read as emphasis) that
    took the code lines under it in as more of its text."""
    head = head or []
    room = limit - sum(ruler.len(h) + 1 for h in head)
    parts: list[str] = []
    chunk: list[str] = []
    size = 0
    for k, line in enumerate(source.split("\n")):
        if ruler.len(line) <= room:
            pieces = [line]
        elif code:
            body = line.lstrip(" \t")
            indent = line[: len(line) - len(body)]
            step = max(room - ruler.len(indent), 1)
            pieces = [indent + piece for piece in ruler.chunks(body, step)]
        else:
            pieces = hard_split(line, room, ruler, spans(k))
        for piece in pieces:
            if chunk and size + ruler.len(piece) + 1 > room:
                parts.append("\n".join([*head, *chunk]).rstrip())
                chunk, size = [], 0
            if not chunk and not piece.strip():
                continue
            chunk.append(piece)
            size += ruler.len(piece) + 1
    if chunk:
        parts.append("\n".join([*head, *chunk]).rstrip())
    return parts


def split_table(source: str, limit: int, ruler: Ruler, spans: LineSpans = _none) -> list[str]:
    """A table cut between its rows, its header and separator rows repeated on each part."""
    lines = source.split("\n")
    head = lines[:2]
    if len(lines) < 3 or sum(ruler.len(h) + 1 for h in head) > limit // 2:
        return split_lines(source, limit, ruler, spans=spans)
    body = "\n".join(lines[2:])
    return split_lines(body, limit, ruler, head, spans=lambda k: spans(k + 2))


def _reopen_markup(markup: str, code: list[str]) -> str:
    """The fence to write a top-level code block with, on parts of its own: its own, made
    longer than any run of its character that starts a line of ``code`` (taken out of an
    indented fence, a line that was code could otherwise read as the closing fence)."""
    mark = markup[:1] or "`"
    runs = (len(line) - len(line.lstrip(mark)) for line in (c.lstrip(" ") for c in code))
    return mark * max(len(markup), 3, max(runs, default=0) + 1)


def split_fence(code: str, markup: str, info: str, limit: int, ruler: Ruler) -> list[str]:
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
    room = max(limit - ruler.len(head) - ruler.len(tail) - 2, 16)
    parts: list[str] = []
    chunk: list[str] = []
    size = 0
    for line in lines:
        for piece in ruler.chunks(line, room):
            if chunk and size + ruler.len(piece) + 1 > room:
                parts.append("\n".join([head, *chunk, tail]))
                chunk, size = [], 0
            chunk.append(piece)
            size += ruler.len(piece) + 1
    parts.append("\n".join([head, *chunk, tail]))
    return parts
