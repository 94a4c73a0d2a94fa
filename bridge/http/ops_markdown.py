"""A transcript's Markdown turned into HTML for the /ops pages, safely.

Why a module of its own: the agent's answers are Markdown, and an operator reading a
conversation on /ops saw them raw (``**bold**``, fenced code, pipes of tables). Every text
here is user input, or an agent's answer to it, so the HTML made from it must not let
anyone put HTML of their own on a page an operator opens with the ops token:

* raw HTML in the Markdown is not HTML: it is shown escaped, as text (markdown-it with
  ``html`` off, and its HTML rules disabled besides);
* a link is a link only to ``http:``, ``https:`` or ``mailto:`` (no ``javascript:``,
  ``data:``, no relative or scheme-less address into the gateway's own pages), and carries
  ``rel="noopener noreferrer nofollow"``; any other address stays as its Markdown text;
* an image is never loaded (the page would fetch it from wherever the text says): it is
  shown as a link to its address, named by its alt text.

The page's Content-Security-Policy (no script, no image from anywhere) stays the second
line of defence. markdown-it-py, a CommonMark parser, does the parsing and escaping: a
converter written by hand would get one of the many corner cases of the syntax wrong.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

LINK_REL = "noopener noreferrer nofollow"
_ALLOWED_LINK = re.compile(r"(?:https?|mailto):", re.IGNORECASE)


def _validate_link(url: str) -> bool:
    """Only http, https and mailto addresses (after markdown-it normalised them)."""
    return _ALLOWED_LINK.match(url.strip()) is not None


def _link_open(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    tokens[idx].attrSet("rel", LINK_REL)
    return str(self.renderToken(tokens, idx, options, env))


def _image(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    alt = self.renderInlineAsText(token.children or [], options, env) or src
    return f'<a class=image href="{escape(src)}" rel="{LINK_REL}">image: {escape(alt)}</a>'


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "breaks": True, "linkify": False})
    md.enable(["table", "strikethrough"])
    md.disable(["html_block", "html_inline"])
    md.validateLink = _validate_link  # type: ignore[method-assign]
    md.add_render_rule("link_open", _link_open)
    md.add_render_rule("image", _image)
    return md


_MD = _parser()


def render(text: str) -> str:
    """``text`` (Markdown, as a chat shows it: a newline is a line break) as safe HTML."""
    return str(_MD.render(text))
