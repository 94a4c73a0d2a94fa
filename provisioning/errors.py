"""One typed error hierarchy for provisioning, so callers catch by type, never by message.

Every message names the path or value at fault and, where there is one, the fix.
"""

from __future__ import annotations


class ProvisioningError(Exception):
    """Base of every error provisioning raises."""


class LayoutError(ProvisioningError):
    """The shared root cannot be created or repaired as it stands (link, wrong owner, ...)."""


class OperatorGroupError(ProvisioningError):
    """The operator group named in the config does not exist on this host."""


class ThreadKeyError(ProvisioningError, ValueError):
    """A thread key that cannot name a conversation (empty, control characters, too long)."""


class AccountError(ProvisioningError):
    """A conversation account could not be created, found or recreated."""


class UidRangeExhausted(AccountError):
    """Every uid of the configured range is in use."""


class UidTaken(AccountError):
    """The uid (or private gid) the map names for a home belongs to another account."""


class StateFileError(ProvisioningError):
    """A state file could not be read or written."""


class NewerSchemaError(StateFileError):
    """A state file was written by a newer jazz-bridge; it is refused and left untouched."""


class IsolationUnavailable(ProvisioningError):
    """Isolation was asked for (``isolation = "on"``) but this process cannot switch users."""


class UnsafePathError(ProvisioningError):
    """A path inside a home is a link or otherwise not what it must be; nothing was followed."""


class ArchiveError(ProvisioningError):
    """A home cannot be archived or restored as things stand; the message says why."""


class TemplateError(ProvisioningError):
    """A new home could not be seeded from ``runner.home_template`` (unreadable, not a
    directory, a write into the home failed); the home is seeded at its next ensure."""


class RlimitsUnavailable(ProvisioningError):
    """Run limits are configured (``limits.run_max_*``) but cannot be applied here."""
