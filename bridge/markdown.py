"""Splitting a Markdown answer to a surface's length limit without breaking its blocks.

markdown-it-py parses the answer (rather than hand-rolled fence counting) and gives each
top-level block its source lines, so parts are cut at paragraph, list or code-block
boundaries; a code block longer than a whole message is split into several fenced blocks,
each closed and reopened with the same fence and language, never cut open.
"""

from __future__ import annotations

from markdown_it import MarkdownIt

_md = MarkdownIt("commonmark")


def _blocks(text: str) -> list[tuple[str, bool, str]]:
    """Top-level blocks as (source, is_fence, fence_info)."""
    lines = text.split("\n")
    tokens = _md.parse(text)
    blocks: list[tuple[str, bool, str]] = []
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
                blocks.append((gap, False, ""))
        source = "\n".join(lines[start:end])
        blocks.append((source, tok.type == "fence", tok.info if tok.type == "fence" else ""))
        last_end = end
    if last_end < len(lines):
        rest = "\n".join(lines[last_end:])
        if rest.strip():
            blocks.append((rest, False, ""))
    return blocks


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
    for source, is_fence, info in _blocks(text):
        pieces = (
            [source]
            if len(source) <= limit
            else (_split_fence(source, info, limit) if is_fence else _hard_split(source, limit))
        )
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
