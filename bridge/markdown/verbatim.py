"""Wrapping text the gateway shows verbatim (a tool's name, a preview of what a tool will
do) so that its own backticks cannot close the wrapper."""

from __future__ import annotations

import re

_BACKTICKS = re.compile(r"`+")


def code_span(text: str) -> str:
    """``text`` as an inline code span whose own backticks cannot end it (CommonMark: a span
    ends at a run of exactly as many backticks as opened it)."""
    text = " ".join(str(text).splitlines()) or " "
    ticks = "`" * (max((len(r) for r in _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def fence_for(text: str) -> str:
    """A backtick fence longer than any backtick run in ``text`` (at least three), so no line
    of it can close the block (a closing fence is at least as long as the opening one)."""
    return "`" * max(3, max((len(r) for r in _BACKTICKS.findall(text)), default=0) + 1)
