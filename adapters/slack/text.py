"""Agent Markdown as Slack takes it: ``markdown_text`` and markdown blocks that notify no
channel, and mrkdwn ``text`` fields (a message's notification text) escaped as Slack's
formatting reference asks.

Pure text, no Web API: it exists apart from the surface so the rendering and escaping rules
(where code is, how links are written, how ``<!channel>`` is defused, where a text is
clipped) are read and tested on their own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pyromark

from bridge.markdown import PARSE_OPTIONS

MARKDOWN_BLOCK_MAX = 11_000  # Slack: 12,000 characters across a message's markdown blocks
MARKDOWN_TEXT_MAX = 12_000  # Slack: chat.postMessage's markdown_text, 12,000 characters


def _plain(text: str, limit: int = 3000) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# <!channel>, <!here>, <!everyone>, <!group>, <!subteam^…>: each notifies many people
_SPECIAL_MENTION = re.compile(r"<(?=!(?:channel|here|everyone|group|subteam\^))", re.IGNORECASE)
_SPECIAL_BANG = re.compile(r"<!(?=(?:channel|here|everyone|group|subteam\^))", re.IGNORECASE)
_JOINED = "<\u200d"  # a zero-width joiner between < and !: reads the same, adds a character
_CLICK = "<\u01c3"  # ! as U+01C3, drawn the same: adds nothing where a joiner won't fit
_ENTITY_TAIL = re.compile(r"&[a-z]{0,3}$")
# Slack's own markup, kept in a mrkdwn text as written: a user or channel mention, a link
_SLACK_TOKEN = re.compile(
    r"<(?:@[UW][A-Z0-9]+|#C[A-Z0-9]+|(?:https?://|mailto:)[^\s<>|]+)(?:\|[^<>\n]*)?>"
)
_LINK_URL = re.compile(r"(?:https?://|mailto:)[^\s<>|]+")


@dataclass
class _Parsed:
    """Where an answer's code and Markdown links are (UTF-8 byte ranges)."""

    code: list[tuple[int, int]]
    links: list[tuple[int, int, str]]  # a link's range and its mrkdwn form


def _parse(text: str) -> _Parsed:
    """The code spans and blocks of ``text`` (shown literally: nothing in them is
    markup), read with the options every surface's Markdown is split with, and its
    Markdown links and images written as mrkdwn links (``<url|label>``,
    or ``label (url)`` for what is not a web address)."""
    parsed = _Parsed([], [])
    open_links: list[tuple[int, int, str, list[str]]] = []  # an image can be in a link
    for payload, where in pyromark.events_with_range(text, options=PARSE_OPTIONS):
        event: Any = payload  # pyromark's union of TypedDicts, read as the dicts they are
        if not isinstance(event, dict):
            continue
        start, end = where["start"], where["end"]
        opened, closed = event.get("Start"), event.get("End")
        if "Code" in event or (isinstance(opened, dict) and "CodeBlock" in opened):
            parsed.code.append((start, end))
        if isinstance(opened, dict) and ("Link" in opened or "Image" in opened):
            data: Any = opened.get("Link") or opened.get("Image")
            if data.get("link_type") in ("Autolink", "Email"):
                continue  # <https://…> is a mrkdwn link as it is
            open_links.append((start, end, str(data.get("dest_url", "")), []))
        elif closed in ("Link", "Image") and open_links:
            start, end, url, label = open_links.pop()
            if not open_links:  # the outermost: its text has the inner ones' text
                parsed.links.append((start, end, _mrkdwn_link(url, "".join(label))))
        piece = event.get("Text", event.get("Code"))
        if isinstance(piece, str):
            for link in open_links:
                link[3].append(piece)
    return parsed


def _escape(text: str) -> str:
    """``&``, ``<`` and ``>`` as HTML entities, as Slack's formatting reference asks of
    text not meant as its markup."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _mrkdwn_link(url: str, label: str) -> str:
    label = " ".join(label.split())
    if _LINK_URL.fullmatch(url):
        link = _escape(url)  # Slack writes & in a link's URL as &amp; too
        return f"<{link}|{_escape(label)}>" if label and label != url else f"<{link}>"
    return _escape(f"{label} ({url})" if label and url else label or url)


def _mrkdwn(text: str, limit: int = 3000) -> str:
    """Agent text for a mrkdwn ``text`` field (the notification's text when the message
    has blocks): readable there, and notifying no channel. A Markdown link becomes a
    mrkdwn link (``<https://x|label>``); Slack's own user and channel mentions and links
    are kept; everything else has ``&``, ``<`` and ``>`` escaped as Slack's formatting
    reference asks, so none of it is read as a mention or link (``<!channel>`` would
    notify the whole channel), code included; clipped without cutting an entity or a
    link in half."""
    raw = text.encode()
    parsed = _parse(text)
    pieces: list[tuple[str, bool]] = []  # (text, whether it is cut only as a whole)
    at = 0
    regions: list[tuple[int, int, str | None]] = [(a, b, None) for a, b in parsed.code]
    regions = sorted([*regions, *parsed.links], key=lambda r: (r[0], r[1]))
    for start, end, form in [*regions, (len(raw), len(raw), None)]:
        if start < at:
            continue  # code inside a link's text: the link is written whole
        plain = raw[at:start].decode()
        last = 0
        for token in _SLACK_TOKEN.finditer(plain):
            pieces.append((_escape(plain[last : token.start()]), False))
            pieces.append((token.group(0), True))
            last = token.end()
        pieces.append((_escape(plain[last:]), False))
        if form is None:
            pieces.append((_escape(raw[start:end].decode()), False))
        else:
            pieces.append((form, True))
        at = end
    out: list[str] = []
    room = limit
    if sum(len(p) for p, _ in pieces) > limit:
        room = limit - 1  # for the "…"
    for piece, whole in pieces:
        if len(piece) <= room:
            out.append(piece)
            room -= len(piece)
            continue
        if not whole:
            out.append(_ENTITY_TAIL.sub("", piece[:room]))
        out.append("…")
        break
    return "".join(out)


def _markdown(text: str, limit: int = MARKDOWN_TEXT_MAX) -> str:
    """Agent text for ``markdown_text`` or a markdown block, at most ``limit`` characters.
    Slack does not document how these treat ``<!channel>`` and the like, nor any escape for
    them (HTML entities would show as typed), so a zero-width joiner (U+200D) goes between
    ``<`` and ``!`` where one would form: the text reads the same and notifies nobody. Not
    in code, which Slack shows as written (nothing in it notifies): there the joiner would
    only corrupt what is copied. A text with so many of them that the joiners would take it
    over ``limit`` (a part cut to the limit full of ``<!here>``, which Slack would refuse)
    gets U+01C3 (LATIN LETTER RETROFLEX CLICK, drawn as ``!``) for each ``!`` instead,
    which adds nothing; a text longer than ``limit`` on its own is clipped first."""
    text = _plain(text, limit)
    if not _SPECIAL_MENTION.search(text):
        return text
    raw = text.encode()
    outside: list[str] = []  # the text between code spans and blocks, then the code itself
    code: list[str] = []
    at = 0
    # parsed with each mention's "<" as a plain letter (the same byte offsets): CommonMark
    # reads a line that starts with "<!here>" as raw HTML, which Slack does not render, so
    # the code on that line would not be found as code and would get joiners
    code_ranges = _parse(_SPECIAL_MENTION.sub("x", text)).code
    for start, end in [*sorted(code_ranges), (len(raw), len(raw))]:
        if start < at:
            continue
        outside.append(raw[at:start].decode())
        code.append(raw[start:end].decode())
        at = end
    found = sum(len(_SPECIAL_MENTION.findall(piece)) for piece in outside)
    if len(text) + found <= limit:
        defused = [_SPECIAL_MENTION.sub(_JOINED, piece) for piece in outside]
    else:
        defused = [_SPECIAL_BANG.sub(_CLICK, piece) for piece in outside]
    return "".join(piece for pair in zip(defused, code, strict=True) for piece in pair)
