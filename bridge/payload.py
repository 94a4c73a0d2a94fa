"""Checks every adapter runs on a platform's JSON before anything reads or keeps it.

A signed or secret-bearing request can still carry a body no platform sends: nesting deep
enough to exhaust a parser's recursion, or half a surrogate pair (``"\\ud800"``) that no
store or encoder accepts. Finding both in one iterative pass here keeps the adapters'
guards to the fields their own platform defines.
"""

from __future__ import annotations

from typing import Any


def scan(value: Any) -> tuple[int, bool]:
    """How deeply ``value`` nests, and whether a string in it has a lone surrogate.

    Iterative, so no nesting depth can hit Python's recursion limit.
    """
    deepest, broken, stack = 0, False, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = [*item.keys(), *item.values()]
        elif isinstance(item, list):
            children = item
        else:
            if isinstance(item, str) and not broken:
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    broken = True
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest, broken


def surely_fine(text: str, max_depth: int) -> bool:
    """True when the JSON ``text`` can neither nest deeper than ``max_depth`` nor hold a lone
    surrogate, so that :func:`scan` of what it parses to can be skipped.

    Two C-speed passes over the text: it has no more brackets than ``max_depth`` in all,
    and no ``\\uD800``-``\\uDFFF`` escape (valid UTF-8 cannot carry a surrogate; an escape is
    the only way JSON makes one). Both err on the safe side: brackets inside strings and
    an escaped backslash before ``ud`` only send the body to the full scan.
    """
    if text.count("[") + text.count("{") > max_depth:
        return False
    return "\\ud" not in text and "\\uD" not in text
