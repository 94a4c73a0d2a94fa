"""``jazz-bridge doctor``'s checks, one module per area: the configuration, the root and its
homes, the home template, the runner, and the platforms (the adapters' own checks).

They only read: modes and owners of the root, ``chats/`` and each home, accounts against the
uid map, the operator group and its members, the configuration, and the runner serve would
start, checked as a run starts it. The configuration is held to the rules ``serve`` starts
by (:mod:`bridge.rules`), so doctor never passes a configuration serve refuses.
"""

from __future__ import annotations

from .check import Check
from .configuration import config_checks
from .platforms import platform_checks
from .root import root_isolated, run_checks, uid_range_check
from .runner import cli_checks, runner_checks
from .template import home_template_checks

__all__ = [
    "Check",
    "cli_checks",
    "config_checks",
    "home_template_checks",
    "platform_checks",
    "root_isolated",
    "run_checks",
    "runner_checks",
    "uid_range_check",
]
