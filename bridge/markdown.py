"""Splitting a Markdown answer to a surface's length limit without breaking its blocks.

markdown-it-py parses the answer (rather than hand-rolled fence counting) and gives each
top-level block its source lines, so parts are cut at paragraph, list or code-block
boundaries; a code block longer than a whole message is split into several fenced blocks,
each closed and reopened with the same fence and language, never cut open. A list or quote
longer than a message is cut between its lines; a code block inside it that a cut falls in
is closed before the cut and reopened after it with its own indentation or quote marks.
"""

from __future__ import annotations

from dataclasses import dataclass

from markdown_it import MarkdownIt

_md = MarkdownIt("commonmark")


@dataclass(frozen=True)
class _Fence:
    """A code block inside a list or quote: its lines relative to the block's first line."""

    start: int  # the opening line
    end: int  # one past the closing line (or past the last line when never closed)
    markup: str  # ``` or ~~~ (as long as the opener's)
    info: str


@dataclass(frozen=True)
class _Block:
    source: str
    is_fence: bool = False
    info: str = ""
    fences: tuple[_Fence, ...] = ()  # code blocks nested inside it


def _blocks(text: str) -> list[_Block]:
    """Top-level blocks, each with the code blocks nested in it."""
    lines = text.split("\n")
    tokens = _md.parse(text)
    nested = [t for t in tokens if t.type == "fence" and t.level > 0 and t.map is not None]
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
            blocks.append(_Block(source, True, tok.info))
        else:
            fences = tuple(
                _Fence(f.map[0] - start, f.map[1] - start, f.markup, f.info)
                for f in nested
                if f.map is not None and start <= f.map[0] and f.map[1] <= end
            )
            blocks.append(_Block(source, fences=fences))
        last_end = end
    if last_end < len(lines):
        rest = "\n".join(lines[last_end:])
        if rest.strip():
            blocks.append(_Block(rest))
    return blocks


def _split_container(block: _Block, limit: int) -> list[str]:
    """A list or quote longer than ``limit``, cut between its lines.

    A cut inside a nested code block closes it at the end of the part and opens it again
    (same fence, language and indentation or quote prefix) at the start of the next, so no
    part leaves code open and no code is read as Markdown.
    """
    lines = block.source.split("\n")
    within: dict[int, tuple[str, str]] = {}  # body line -> (closer, reopener)
    closing: set[int] = set()
    for f in block.fences:
        opener = lines[f.start]
        prefix = opener[: opener.find(f.markup)] if f.markup in opener else ""
        closer, reopener = prefix + f.markup, prefix + f.markup + f.info
        last = f.end - 1  # the closing line, when the block is closed
        closed = last > f.start and lines[last].strip().startswith(f.markup)
        for i in range(f.start + 1, last if closed else f.end):
            within[i] = (closer, reopener)
        if closed:
            closing.add(last)
    parts: list[str] = []
    chunk: list[str] = []
    size = 0
    for i, line in enumerate(lines):
        inside = within.get(i)
        reserve = len(inside[0]) + 1 if inside else 0
        room = max(limit - reserve - (len(inside[1]) + 1 if inside else 0), 16)
        for piece in [line[j : j + room] for j in range(0, len(line), room)] or [""]:
            fits = size + len(piece) + 1 + reserve <= limit or i in closing
            if chunk and not fits:
                if inside:
                    chunk.append(inside[0])
                parts.append("\n".join(chunk).rstrip())
                chunk = [inside[1]] if inside else []
                size = sum(len(c) + 1 for c in chunk)
                if not inside:
                    piece = piece.lstrip(" ")  # a part does not start indented as code
            chunk.append(piece)
            size += len(piece) + 1
    if chunk and "\n".join(chunk).strip():
        parts.append("\n".join(chunk).rstrip())
    return parts


def _hard_split(text: str, limit: int) -> list[str]:
    """Split plain text at the last newline or space before ``limit``."""
    parts = []
    while len(text) > limit:
        cut = text.rfind("\n", 0, limit)
        if cut < limit // 2:
            cut = text.rfind(" ", 0, limit)
        if cut < limit // 2:
            cut = limit
        parts.append(text[:cut].rstrip())
        text = text[cut:].lstrip("\n ")
    if text:
        parts.append(text)
    return parts


def _split_fence(source: str, info: str, limit: int) -> list[str]:
    lines = source.split("\n")
    opener = lines[0]
    fence = opener.strip()[: len(opener.strip()) - len(opener.strip().lstrip("`~"))] or "```"
    body = lines[1:-1] if len(lines) > 1 and lines[-1].strip().startswith(fence[:3]) else lines[1:]
    head, tail = f"{fence}{info}", fence
    room = max(limit - len(head) - len(tail) - 2, 16)
    parts: list[str] = []
    chunk: list[str] = []
    size = 0
    for line in body:
        pieces = [line[i : i + room] for i in range(0, len(line), room)] or [""]
        for piece in pieces:
            if chunk and size + len(piece) + 1 > room:
                parts.append("\n".join([head, *chunk, tail]))
                chunk, size = [], 0
            chunk.append(piece)
            size += len(piece) + 1
    parts.append("\n".join([head, *chunk, tail]))
    return parts


def split_markdown(text: str, limit: int) -> list[str]:
    """Parts of at most ``limit`` characters, cut between blocks, code blocks kept whole."""
    if limit < 64:
        raise ValueError("limit must be at least 64 characters")
    text = text.strip("\n")
    if len(text) <= limit:
        return [text] if text else []
    parts: list[str] = []
    current = ""
    for block in _blocks(text):
        source = block.source
        if len(source) <= limit:
            pieces = [source]
        elif block.is_fence:
            pieces = _split_fence(source, block.info, limit)
        elif block.fences:
            pieces = _split_container(block, limit)
        else:
            pieces = _hard_split(source, limit)
        for piece in pieces:
            joined = f"{current}\n\n{piece}" if current else piece
            if len(joined) <= limit:
                current = joined
            else:
                if current:
                    parts.append(current)
                current = piece
    if current:
        parts.append(current)
    return parts
