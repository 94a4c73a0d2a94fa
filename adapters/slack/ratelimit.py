"""Slack's rate limits, kept per Web API method and workspace (team), as Slack counts them.

A 429 closes that method in that workspace for its ``Retry-After``: calls meanwhile are not
made (a :class:`~bridge.ports.DeliveryError` carrying the time left, which the core's
delivery waits out). chat.update also has a budget per workspace (Tier 3, about 50 a
minute), a token bucket every edit is counted against. Workspaces never wait for each
other. Apart from the surface so the pacing is one small object the posts, edits, uploads
and searches all ask before they call Slack.
"""

from __future__ import annotations

import logging
import time

from bridge.ports import DeliveryError

from .errors import retry_after_of

log = logging.getLogger(__name__)

CHAT_UPDATE_PER_MINUTE = 50  # Slack Tier 3, per workspace: no minute holds more edits
CHAT_UPDATE_BURST = 5  # of those, how many one workspace may make at once after a quiet spell


class EditBudget:
    """One workspace's chat.update calls: a token bucket holding up to ``burst`` calls,
    refilled so that no minute holds more than ``per_minute`` of them, the burst included."""

    def __init__(self, per_minute: int, burst: int) -> None:
        self.burst = float(max(1, min(burst, per_minute - 1)))
        self.rate = (per_minute - self.burst) / 60.0  # calls a second
        self.tokens = self.burst
        self.at = time.monotonic()

    def wait(self, now: float) -> float:
        """Seconds until a call may be made: 0 now."""
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        return 0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) / self.rate

    def take(self) -> None:
        self.tokens -= 1.0

    def full(self, now: float) -> bool:
        self.wait(now)
        return self.tokens >= self.burst


class RateLimits:
    """Which Web API methods each workspace may call now: a 429's Retry-After, and for
    chat.update the workspace's budget (past ``budgets_kept`` workspaces, those whose
    budget is full are forgotten: a full budget is as good as a new one)."""

    def __init__(self, budgets_kept: int) -> None:
        self._budgets_kept = budgets_kept
        # (Web API method, team) -> monotonic time a 429 reopens it
        self._closed_until: dict[tuple[str, str], float] = {}
        self._budgets: dict[str, EditBudget] = {}  # team -> its chat.update budget

    def wait(self, method: str, team: str) -> float:
        """Seconds until ``method`` may be called in ``team``: a 429's Retry-After, and for
        chat.update the workspace's budget."""
        now = time.monotonic()
        left = self._closed_until.get((method, team), 0.0) - now
        if method == "chat.update":
            left = max(left, self.budget(team).wait(now))
        return left

    def gate(self, method: str, team: str) -> None:
        """Refuse (without calling Slack) while ``method`` may not be called in ``team``;
        else count the call against the workspace's budget."""
        left = self.wait(method, team)
        if left > 0:
            raise DeliveryError(f"{method}: rate limited for {left:.1f}s more", retry_after=left)
        if method == "chat.update":
            self.budget(team).take()

    def budget(self, team: str) -> EditBudget:
        """The workspace's chat.update budget (a new one, full, for a team not seen yet)."""
        budget = self._budgets.get(team)
        if budget is None:
            if len(self._budgets) > self._budgets_kept:  # a full budget is as good as a new one
                now = time.monotonic()
                for old in [t for t, b in self._budgets.items() if b.full(now)]:
                    del self._budgets[old]
            budget = self._budgets[team] = EditBudget(CHAT_UPDATE_PER_MINUTE, CHAT_UPDATE_BURST)
        return budget

    def note(self, method: str, team: str, exc: Exception) -> None:
        """Close ``method`` in ``team`` for the Retry-After of ``exc`` when it is a 429."""
        retry_after = retry_after_of(exc)
        if retry_after is not None:
            self._closed_until[(method, team)] = time.monotonic() + retry_after
            log.info("slack: %s rate limited in %s for %.1fs", method, team, retry_after)
