"""The one Markdown pipeline: an answer is parsed once (:mod:`.tree`, pyromark with the
extensions every surface renders with), split on that tree to a surface's limit in the
surface's own unit (:mod:`.units`: characters, or Telegram's UTF-16 code units), and each
part is rendered by its surface (Telegram's converter, Slack's ``markdown_text``, the web
chat). A part renders as its share of the whole answer would: the property test in
``tests/bridge/test_markdown.py`` checks it for generated Markdown.

Parts are cut between top-level blocks (paragraphs, lists, code blocks); a block longer
than a part is cut inside (:mod:`.blocks`: tables, code blocks; :mod:`.nested`: lists and
quotes; :mod:`.inline`: a paragraph or a line, outside its inline spans), and link
reference definitions go with every part that uses them (:mod:`.references`). Every part is
within the limit, whatever the nesting: a block no cut can bring under the limit is cut
as text. :func:`code_span` and :func:`fence_for` wrap text the gateway shows verbatim.
"""

from __future__ import annotations

import logging

from .blocks import split_fence, split_lines, split_table
from .inline import hard_split
from .nested import split_container
from .references import definitions, with_definitions
from .tree import PARSE_OPTIONS, Tree, parse
from .units import CHARACTERS, UTF16, Ruler, Unit, utf16_len
from .verbatim import code_span, fence_for

__all__ = [
    "CHARACTERS",
    "PARSE_OPTIONS",
    "UTF16",
    "Ruler",
    "Unit",
    "closed",
    "code_span",
    "fence_for",
    "split_markdown",
    "utf16_len",
]

log = logging.getLogger(__name__)

MIN_PART = 64  # the least limit a part is cut to
DEFINITIONS_SHARE = 4  # link definitions repeated on each part take at most 1/4 of it


def closed(text: str) -> str:
    """``text`` with a code block it leaves open at its end closed: whatever follows it (the
    run's summary line) would otherwise read as more code. A model cut off by its token
    limit stops mid-block."""
    blocks = parse(text.rstrip("\n")).blocks
    if not blocks or blocks[-1].kind != "fence":
        return text
    last = blocks[-1]
    lines = last.source.split("\n")
    tail = lines[-1].strip() if len(lines) > 1 else ""
    char = last.markup[:1]
    if tail and set(tail) == {char} and len(tail) >= len(last.markup):
        return text  # it has its closing fence
    return text.rstrip("\n") + "\n" + last.markup


def split_markdown(text: str, limit: int, unit: Unit = CHARACTERS) -> list[str]:
    """Parts of at most ``limit`` ``unit``\\ s (characters, or UTF-16 code units), cut
    between blocks, code blocks kept whole; each with the link reference definitions its
    links use."""
    if limit < MIN_PART:
        raise ValueError(f"limit must be at least {MIN_PART} characters")
    ruler = Ruler(unit)
    # one kind of line break: the parser also breaks lines at a lone "\r", str.split won't
    text = text.replace("\r\n", "\n").replace("\r", "\n").strip("\n")
    if ruler.len(text) <= limit:
        return [text] if text else []
    rest, found = definitions(text)
    room = limit - sum(ruler.len(d.source) + 1 for d in found) - 1  # "\n\n" and the lines
    if not found or room < max(MIN_PART, limit - limit // DEFINITIONS_SHARE):
        # more definitions than a part can carry (or none): left where they were
        if found:
            log.debug("%d link definitions left in place: too long to repeat", len(found))
        return _split(text, limit, ruler)
    return [with_definitions(part, found) for part in _split(rest, room, ruler)]


def _pieces(tree: Tree, k: int, limit: int, ruler: Ruler) -> list[str]:
    """The ``k``-th top-level block of ``tree`` in pieces of at most ``limit`` units."""
    block = tree.blocks[k]
    source = block.source
    if ruler.len(source) <= limit:
        return [source]

    def spans(i: int) -> list[tuple[int, int]]:
        return tree.line_spans(block.line + i)

    if block.kind == "fence":
        pieces = split_fence(block.code, block.markup, block.info, limit, ruler)
    elif block.kind == "container":
        pieces = split_container(block, limit, ruler, spans)
    elif block.kind == "table":
        pieces = split_table(source, limit, ruler, spans)
    elif block.kind == "code":
        pieces = split_lines(source, limit, ruler, code=True)
    else:
        at = tree.line_at[block.line]
        pieces = hard_split(source, limit, ruler, tree.spans_in(at, at + len(source)))
    if any(ruler.len(piece) > limit for piece in pieces):
        # a block no cut above could bring under the limit (nesting or an info string
        # longer than a part): cut as text, its markup shown rather than a part refused
        log.debug("a %s block of %d characters is cut as plain text", block.kind, len(source))
        pieces = [
            cut
            for piece in pieces
            for cut in ([piece] if ruler.len(piece) <= limit else hard_split(piece, limit, ruler))
        ]
    return pieces


def _split(text: str, limit: int, ruler: Ruler) -> list[str]:
    if ruler.len(text) <= limit:
        return [text] if text else []
    tree = parse(text)
    parts: list[str] = []
    current: list[str] = []  # the pieces of the part being filled, joined when it is full
    size = -2  # the length of that part, once joined
    for k in range(len(tree.blocks)):
        for piece in _pieces(tree, k, limit, ruler):
            n = ruler.len(piece)
            if current and size + 2 + n > limit:
                parts.append("\n\n".join(current))
                current, size = [], -2
            current.append(piece)
            size += 2 + n
    if current:
        parts.append("\n\n".join(current))
    return parts
