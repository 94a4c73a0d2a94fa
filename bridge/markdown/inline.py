"""Cutting a run of text (a paragraph, a line of a list) that is longer than a part.

A cut goes at a space outside the inline spans the parser found (links, emphasis, code
spans, ``$math$``, HTML tags: a cut inside one shows its markers as text on both sides),
never before text that would start a list, heading or quote at the top of the next part;
a hard cut is left for a span longer than a whole part. Lengths are in the surface's unit.
"""

from __future__ import annotations

import bisect
import re

from .tree import spans_of
from .units import Offsets, Ruler

# what would start a block of its own at the top of a part (not a paragraph's text)
_BLOCK_START = re.compile(
    r"(?:[-+*](?:[ \t]|$)|#{1,6}(?:[ \t]|$)|>|[0-9]{1,9}[.)](?:[ \t]|$)|`{3}|~{3}|=+[ \t]*$"
    r"|-+[ \t]*$|<|\|)"
)

Spans = list[tuple[int, int]]


def _inside(spans: Spans, starts: list[int], pos: int) -> bool:
    k = bisect.bisect_right(starts, pos) - 1
    return k >= 0 and spans[k][0] < pos < spans[k][1]


# a line's quote marks and list item marker, with the spaces after them
_CONTAINER_MARKS = re.compile(r"(?:[ \t]*>)*[ \t]*(?:(?:[-+*]|\d{1,9}[.)])[ \t]+)?")


def _cut(text: str, base: int, limit: int, spans: Spans, starts: list[int], at: Offsets) -> int:
    """Where to cut ``text[base:]`` so the part before is at most ``limit`` units: a line
    break in the second half, else the last space, all outside inline spans and not before
    a block start; else the last space at all (a span longer than a message); else as
    much as fits."""
    fits = max(at.index(at.at(base) + limit), base + 1)
    top = min(fits, len(text) - 1)
    head = text[base : top + 1]
    first = base + len(head) - len(head.lstrip())  # no cut before the part has text
    if base == 0 or text[base - 1] == "\n":
        # nor inside a line's container marks (a quote's ">", an item's "-"): a part of
        # those alone reads as nothing, or as a literal ">"
        marks = _CONTAINER_MARKS.match(text, base)  # it matches always (all optional)
        if marks is not None:
            first = max(first, marks.end() - 1)
    best = -1
    any_space = -1
    for p in range(top, first, -1):
        if text[p] not in " \n":
            continue
        if any_space < 0:
            any_space = p
        used = at.at(p) - at.at(base)
        if best >= 0 and used < limit // 2:
            break  # no line break in the second half: the last space it is
        if _inside(spans, starts, p):
            continue
        rest = text[p : p + 64].lstrip(" \n")[:16]
        if not rest or _BLOCK_START.match(rest):
            continue
        if text[p] == "\n" and used >= limit // 2:
            return p
        if best < 0:
            best = p
    if best >= 0:
        return best
    if any_space > base:
        return any_space
    return fits


def hard_split(text: str, limit: int, ruler: Ruler, spans: Spans | None = None) -> list[str]:
    """Split a paragraph (or other run of text) at spaces or line breaks outside inline
    spans (``spans``, relative to ``text``; parsed from it alone when not given), each
    part at most ``limit`` units."""
    spans = spans_of(text)[0] if spans is None else spans
    starts = [s for s, _ in spans]
    at = ruler.offsets(text)
    parts = []
    base = 0
    while at.at(len(text)) - at.at(base) > limit:
        cut = _cut(text, base, limit, spans, starts, at)
        piece = text[base:cut].rstrip()
        if piece:
            parts.append(piece)
        base = cut
        while base < len(text) and text[base] in " \n":
            base += 1
    if text[base:].strip():
        parts.append(text[base:])
    return parts
