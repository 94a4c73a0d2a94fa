"""The Markdown mended before telegramify converts it, where its conversion would lose text.

Kept apart from :mod:`.render` (which converts, fits and splits) because each mend is a
parse of its own over the source, with its own reasons: raw HTML in an answer
(``<your-token>``, ``Vec<u8>``, an XML snippet outside a fence) is shown as the text it is
(the converter drops HTML it has no entity for); in a list item the converter runs the
text after a table, code block, heading or rule onto its last line (``x | ypara``), so a
hard line break opens that text; a bare web address is made an autolink so its
``__init__`` is not read as emphasis. Link targets are mended in :mod:`.link_targets`.
"""

from __future__ import annotations

import bisect
import re
from typing import Any

import pyromark

from bridge.markdown import PARSE_OPTIONS

KEPT_HTML = frozenset({"<tg-spoiler>", "</tg-spoiler>"})  # the one tag Telegram shows


def literal_html(markdown: str) -> str:
    """``markdown`` with raw HTML escaped (``\\<``), so it shows as the text it is.

    CommonMark reads ``<your-token>`` or ``List<String>`` as inline HTML and a line that
    starts with a tag as an HTML block; the converter drops both. The parser says where
    they are (code spans and blocks are never HTML), and each ``<`` there is escaped.
    """
    if "<" not in markdown:
        return markdown
    raw = markdown.encode()
    cuts: list[int] = []  # byte offsets of each "<" to escape
    for payload, where in pyromark.events_with_range(markdown, options=PARSE_OPTIONS):
        if not isinstance(payload, dict):
            continue
        html = payload.get("InlineHtml", payload.get("Html"))
        if not isinstance(html, str) or html.strip().lower() in KEPT_HTML:
            continue
        start, end = where["start"], where["end"]
        cuts.extend(i for i in range(start, end) if raw[i] == 0x3C)  # "<"
    if not cuts:
        return markdown
    out = bytearray()
    last = 0
    for i in sorted(set(cuts)):
        out += raw[last:i] + b"\\"
        last = i
    out += raw[last:]
    return out.decode()


# blocks the converter ends, inside a list item, without a line break after them
UNENDED_BLOCKS = frozenset({"Table", "CodeBlock", "Heading", "Rule"})
INLINE_STARTS = frozenset({"Paragraph", "Strong", "Emphasis", "Strikethrough", "Link", "Image"})
INLINE_EVENTS = frozenset({"Text", "Code", "InlineMath", "InlineHtml", "FootnoteReference"})
UNDERLINE = re.compile(rb"(?:=+|-+)[ ]*(?:\n|$)")  # a setext heading's underline
# blocks the converter runs onto the item text before them while no block has ended yet
GLUED_BLOCKS = frozenset({"CodeBlock", "Table", "Heading", "BlockQuote"})
# ends the converter counts as a block's end (a paragraph's only outside lists)
COUNTED_ENDS = frozenset({"Heading", "CodeBlock", "BlockQuote", "Table"})


def _name(tag: Any) -> str:
    return tag if isinstance(tag, str) else next(iter(tag), "") if isinstance(tag, dict) else ""


def broken_after_blocks(markdown: str) -> str:
    """``markdown`` with a hard line break (``\\`` and a newline) opening the text that
    follows a table, code block, heading or rule in a list item.

    In a list item the converter writes such text straight after the block, with no line
    break: a paragraph under a table read ``x | ypara``, one under a code block ``xpara``
    (outside lists it adds the break itself). The hard break puts it on a line of its own,
    as the text would be anywhere else; the new line keeps the paragraph's quote marks and
    indentation.

    The converter also runs a tight item's text into a code block, table, heading or quote
    that follows it in the item (``- item`` over a fence read ``itemcode``) until some
    block of the message has ended (then it adds the line break itself): a blank line
    before such a block, while none has ended, makes the item's text a paragraph of its
    own, ended by a line break.
    """
    if "\n" not in markdown:
        return markdown
    raw = markdown.encode()
    # [the container's name, whether a block just ended in it, whether inline text did]
    stack: list[list[Any]] = []
    cuts: list[tuple[int, bool]] = []  # byte offsets where a hard break (or a blank line) goes
    ended = False  # whether the converter has counted a block's end yet
    for payload, where in pyromark.events_with_range(markdown, options=PARSE_OPTIONS):
        event: Any = payload
        in_item = bool(stack) and stack[-1][0] == "Item"
        if isinstance(event, str):  # a rule, a soft or hard break
            if event == "Rule":
                if in_item and stack[-1][2] and not ended:
                    cuts.append((where["start"], False))
                ended = True
            if in_item:
                stack[-1][1:] = [event == "Rule", event != "Rule"]
            continue
        if not isinstance(event, dict):
            continue
        if "End" in event:
            name = stack.pop()[0] if stack else ""
            lists = sum(entry[0] == "List" for entry in stack)
            if name in COUNTED_ENDS or (name in ("Paragraph", "List") and not lists):
                ended = True
            if stack and stack[-1][0] == "Item":
                stack[-1][1:] = [name in UNENDED_BLOCKS, name in INLINE_STARTS - {"Paragraph"}]
            continue
        opened = _name(event["Start"]) if "Start" in event else ""
        inline = opened in INLINE_STARTS or bool(INLINE_EVENTS & event.keys())
        if in_item and stack[-1][1] and inline:
            cuts.append((where["start"], True))
        if in_item and stack[-1][2] and opened in GLUED_BLOCKS and not ended:
            cuts.append((where["start"], False))
        if "DisplayMath" in event:
            ended = True
        if in_item:
            stack[-1][1:] = [False, inline and opened != "Paragraph"]
        if opened:
            stack.append([opened, False, False])
    if not cuts:
        return markdown
    out = bytearray()
    last = 0
    for at, hard in cuts:
        line = raw[raw.rfind(b"\n", 0, at) + 1 : at].decode()
        prefix = "".join(c if c == ">" else " " for c in line)  # its quote marks, indentation
        if not hard:  # a blank line before the block
            out += raw[last:at] + b"\n" + prefix.encode()
            last = at
            continue
        # a first line of = would underline the break's line as a heading: escaped
        escape = b"\\" if UNDERLINE.match(raw, at) else b""
        out += raw[last:at] + b"\\\n" + prefix.encode() + escape
        last = at
    out += raw[last:]
    return out.decode()


# a bare web address as GitHub finds one in text (its extended autolinks); what ends it
BARE_URL = re.compile(rb"(?<![\w@])https?://[^\s<>|`\\]+")
URL_TAIL = b"?!.,:;*_~'\""  # trailing punctuation, not part of the address
NOT_TEXT = frozenset({"Code", "InlineHtml", "Html", "InlineMath", "DisplayMath"})
NOT_TEXT_BLOCKS = frozenset({"CodeBlock", "Link", "Image", "HtmlBlock"})


def bare_urls(markdown: str) -> str:
    """``markdown`` with each bare web address in its text made an autolink (``<url>``).

    The converter has no extended autolinks, so a bare ``https://…/pkg/__init__.py`` was
    read as Markdown: ``__init__`` in bold, the underscores gone, and Telegram linked the
    address that was left, which does not exist. Written as an autolink it is shown and
    linked as it is. Addresses in code, links and raw HTML are left alone; punctuation that
    ends a sentence, and a closing parenthesis the address did not open, stay outside it.
    """
    if "://" not in markdown:
        return markdown
    raw = markdown.encode()
    skip: list[tuple[int, int]] = []  # byte ranges that are not text: code, links, HTML
    for payload, where in pyromark.events_with_range(markdown, options=PARSE_OPTIONS):
        if not isinstance(payload, dict):
            continue
        event: Any = payload
        opened = event.get("Start")
        if NOT_TEXT & event.keys() or _name(opened) in NOT_TEXT_BLOCKS:
            skip.append((where["start"], where["end"]))
    skip.sort()
    starts = [a for a, _ in skip]
    out = bytearray()
    last = 0
    for m in BARE_URL.finditer(raw):
        start, end = m.start(), m.end()
        k = bisect.bisect_right(starts, start) - 1
        if k >= 0 and start < skip[k][1]:
            continue
        while end > start and (
            raw[end - 1] in URL_TAIL
            or (raw[end - 1] == 0x29 and raw.count(b")", start, end) > raw.count(b"(", start, end))
        ):
            end -= 1
        if end - start <= len(b"https://"):
            continue
        out += raw[last:start] + b"<" + raw[start:end] + b">"
        last = end
    if not last:
        return markdown
    out += raw[last:]
    return out.decode()
