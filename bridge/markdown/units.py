"""How a surface counts a message's length, so an answer is split once, in that unit.

Slack and the web chat count characters; Telegram counts UTF-16 code units, in which a
character outside the Basic Multilingual Plane (an emoji, a CJK extension ideograph) takes
two. Split by characters, a part full of emoji was twice Telegram's limit and had to be
split again after rendering, where the Markdown was no longer there to cut well. A
surface declares its unit (:attr:`bridge.ports.Capabilities.length_unit`) and the splitter
measures every piece with the :class:`Ruler` for it.
"""

from __future__ import annotations

import bisect
from itertools import accumulate
from typing import Literal

Unit = Literal["characters", "utf16"]
CHARACTERS: Unit = "characters"
UTF16: Unit = "utf16"


def utf16_len(text: str) -> int:
    """``text``'s length in UTF-16 code units (as Telegram counts)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) >> 1


class Ruler:
    """Measures text in one unit, and finds how much of a text fits in so many units."""

    def __init__(self, unit: Unit = CHARACTERS) -> None:
        if unit not in (CHARACTERS, UTF16):
            raise ValueError(f"unknown length unit {unit!r}")
        self.unit = unit
        self.wide = unit == UTF16  # astral characters count two

    def len(self, text: str) -> int:
        return utf16_len(text) if self.wide else len(text)

    def offsets(self, text: str) -> Offsets:
        return Offsets(text, self.wide)

    def chunks(self, text: str, room: int) -> list[str]:
        """``text`` cut into pieces of at most ``room`` units (at least one character each),
        or ``[""]`` for an empty text."""
        if not text:
            return [""]
        at = self.offsets(text)
        pieces: list[str] = []
        start = 0
        while start < len(text):
            end = max(at.index(at.at(start) + room), start + 1)
            pieces.append(text[start:end])
            start = end
        return pieces


class Offsets:
    """Where each character of a text starts, in a unit: ``at(i)`` for ``text[:i]``, and
    ``index(u)``, the most characters from the start that take at most ``u`` units."""

    def __init__(self, text: str, wide: bool) -> None:
        self.size = len(text)
        self._table: list[int] | None = None
        if wide and not text.isascii():
            self._table = [0, *accumulate(2 if ord(c) > 0xFFFF else 1 for c in text)]

    def at(self, i: int) -> int:
        return i if self._table is None else self._table[i]

    def index(self, units: int) -> int:
        if self._table is None:
            return max(0, min(units, self.size))
        return max(0, bisect.bisect_right(self._table, units) - 1)
