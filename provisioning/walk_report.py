"""What a walk of homes did: counts, the failures and the entries it left alone, each with why.

Its own module so the walk (:mod:`provisioning.walk`) stays one job; the repair's report
(:mod:`provisioning.repair`) and ``jazz-bridge repair`` show these. The lists are bounded
(``MAX_ERRORS``, ``MAX_SKIPS``): a home of a million links names the first ones and counts
the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_ERRORS = 50
MAX_SKIPS = 50  # skipped entries named with their reason; the rest only counted


@dataclass
class WalkReport:
    checked: int = 0
    changed: int = 0
    skipped: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)  # "path: reason", at most MAX_ERRORS
    skips: list[str] = field(default_factory=list)  # "path: why left alone", at most MAX_SKIPS
    skipped_by_marker: bool = False  # the marker was there and force was not given

    def merge(self, other: WalkReport) -> None:
        self.checked += other.checked
        self.changed += other.changed
        self.skipped += other.skipped
        self.failed += other.failed
        room = MAX_ERRORS - len(self.errors)
        if room > 0:
            self.errors.extend(other.errors[:room])
        room = MAX_SKIPS - len(self.skips)
        if room > 0:
            self.skips.extend(other.skips[:room])

    def as_dict(self) -> dict[str, int]:
        return {
            "checked": self.checked,
            "changed": self.changed,
            "skipped": self.skipped,
            "failed": self.failed,
        }

    def note_skip(self, where: str, why: str) -> None:
        """Name one skipped entry and why (while there is room); counting it is the
        caller's (the walk counts in bulk). ``where`` is shown escaped, as in :meth:`fail`."""
        if len(self.skips) < MAX_SKIPS:
            self.skips.append(f"{shown(where)}: {why}")

    def fail(self, where: str, why: str) -> None:
        """Count one failure and keep its message (while there is room).

        ``where`` holds names a conversation chose: shown escaped (:func:`shown`), so a
        newline or a terminal escape in one never reaches an operator's screen as such.
        """
        self.failed += 1
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(f"{shown(where)}: {why}")


def shown(text: str) -> str:
    """``text`` with what is not printable escaped: ``\\n``, ``\\x1b``, and ``\\xff`` for a
    byte that is not UTF-8 (a surrogate ``os.fsdecode`` made of it)."""
    if text.isprintable():
        return text
    out = []
    for char in text:
        if char.isprintable():
            out.append(char)
        elif "\udc80" <= char <= "\udcff":
            out.append(f"\\x{ord(char) - 0xDC00:02x}")
        else:
            out.append(ascii(char)[1:-1])
    return "".join(out)
