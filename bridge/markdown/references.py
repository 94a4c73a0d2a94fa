"""Link reference definitions, repeated in every part that uses them.

Each part is rendered on its own, so a reference link (``[the docs][1]``, with
``[1]: https://...`` at the end, as models write citations) would work only in the part
holding its definition: top-level definitions are taken out and each part gets back the
ones its links use, with room kept for them.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from itertools import accumulate

from .tree import PARSER, parse

# what may be a link's label: a bracketed run without unescaped brackets
_LABEL = re.compile(r"\[((?:[^\[\]\\]|\\.){1,999})\]")


def _key(label: str) -> str:
    """A label as CommonMark matches it: case-folded, its whitespace collapsed."""
    return " ".join(label.split()).casefold()


@dataclass(frozen=True)
class Definition:
    """A top-level link reference definition (``[label]: url "title"``), as written."""

    key: str  # its label as CommonMark matches it
    source: str


def definitions(text: str) -> tuple[str, list[Definition]]:
    """``text`` with its top-level link reference definitions blanked out, and those
    definitions. One inside a list or quote stays where it is."""
    if "]:" not in text:  # no definition (the parse below takes as long as the split)
        return text, []
    references = PARSER.reference_definitions(text)
    if not references:
        return text, []
    tree = parse(text)
    blocks = [(b.line, b.line + b.source.count("\n") + 1) for b in tree.blocks if b.kind != "gap"]
    starts = [b[0] for b in blocks]
    lines = tree.lines
    raw = text.encode()
    line_bytes = [0, *accumulate(len(line) + 1 for line in raw.split(b"\n"))]
    found: list[Definition] = []
    for label, ref in references.items():
        span = ref["span"]
        start = bisect.bisect_right(line_bytes, span["start"]) - 1
        end = bisect.bisect_right(line_bytes, max(span["end"] - 1, span["start"]))
        k = bisect.bisect_right(starts, start) - 1
        if k >= 0 and blocks[k][0] <= start < blocks[k][1]:
            continue  # inside a list or quote
        found.append(Definition(_key(label), "\n".join(lines[start:end])))
        lines[start:end] = [""] * (end - start)  # blank lines: nothing around them changes
    return "\n".join(lines).strip("\n"), found


def with_definitions(part: str, found: list[Definition]) -> str:
    """``part`` followed by the definitions its brackets may use (one too many is harmless:
    a definition shows nothing), unless the part would take them in (an unclosed code
    block at its end)."""
    labels = {_key(m.group(1)) for m in _LABEL.finditer(part)}
    used = [d.source for d in found if d.key in labels]
    if not used:
        return part
    notes = "\n".join(used)
    whole = f"{part}\n\n{notes}"
    first = len(part.encode()) + 2  # where the definitions start
    kept = PARSER.reference_definitions(whole)
    if sum(d["span"]["start"] >= first for d in kept.values()) < len(used):
        return part  # taken in by the part (or a definition the part has already)
    return whole
