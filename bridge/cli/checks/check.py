"""One line of ``jazz-bridge doctor``: what was checked, whether it passed, and the fix.

Every area's checks return these, so the command prints (or dumps as JSON) them alike.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    ok: bool
    what: str
    fix: str = ""
    warn: bool = False  # passed, with something to look at (``fix`` says what)

    def line(self) -> str:
        if self.warn:
            return f"WARN {self.what} -> {self.fix}"
        return f"{'OK  ' if self.ok else 'FAIL'} {self.what}" + (
            "" if self.ok else f" -> {self.fix}"
        )
