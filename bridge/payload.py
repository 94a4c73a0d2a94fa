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
