"""One typed error hierarchy for the gateway core; callers catch by type, never by message."""

from __future__ import annotations


class BridgeError(Exception):
    """Base of every error the gateway core raises."""


class ConfigError(BridgeError):
    """The configuration is invalid; the message names the key and what is wrong."""


class RunnerError(BridgeError):
    """A runner could not be started (not found, not executable)."""


class AdapterError(BridgeError):
    """An adapter cannot start (missing credential, refused allowlist, ...)."""
