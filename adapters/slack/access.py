"""Who the Slack adapter answers, and how it counts what it turns away.

The allowlists (``slack.allowed_teams``/``allowed_channels``/``allowed_users``,
``allow_everyone``) and the operators are asked the same way by a message, a button press
and ``/jazz``; each of those (:mod:`.intake`, :mod:`.presses`, :mod:`.command`) holds this
one object rather than its own copy of the rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .spec import SlackSettings

if TYPE_CHECKING:
    from bridge.metrics import Metrics

PLATFORM = "slack"


@dataclass(frozen=True)
class Access:
    """The settings' allowlists and operators, as sets."""

    allow_everyone: bool
    teams: frozenset[str]
    channels: frozenset[str]
    users: frozenset[str]
    operators: frozenset[str]

    @classmethod
    def of(cls, settings: SlackSettings) -> Access:
        return cls(
            allow_everyone=settings.allow_everyone,
            teams=frozenset(settings.allowed_teams),
            channels=frozenset(settings.allowed_channels),
            users=frozenset(settings.allowed_users),
            operators=frozenset(settings.operators),
        )

    def allowed(self, team: str, channel: str, user: str) -> bool:
        if self.allow_everyone:
            return True
        return (
            (not self.teams or team in self.teams)
            and (not self.channels or channel in self.channels)
            and (not self.users or user in self.users)
        )

    def is_operator(self, user: str) -> bool:
        return user in self.operators


def count(metrics: Metrics, outcome: str) -> None:
    """One message (event, press, command) counted in /metrics under ``outcome``."""
    metrics.messages.labels(PLATFORM, outcome).inc()
