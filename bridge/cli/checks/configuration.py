"""Doctor's check of the configuration, by the rules serve starts by (:mod:`bridge.rules`):
so doctor never passes a configuration serve refuses, and names each broken rule with the
line serve would refuse to start with.
"""

from __future__ import annotations

from ... import rules
from ...config import CoreSettings
from ...logs import SecretMasker, secret_values
from ...ports import AdapterSpec
from .check import Check


def config_checks(settings: CoreSettings, specs: dict[str, AdapterSpec]) -> list[Check]:
    """The configuration against the rules serve starts by (:mod:`bridge.rules`): one failed check
    per rule broken, its fix the line serve would refuse to start with."""
    broken = rules.problems(settings, specs)
    masker = SecretMasker(secret_values(settings))
    # sections that stay off for a missing credential: not broken, but most likely meant on
    dormant = [
        Check(True, "configured sections are on", masker.mask(line), warn=True)
        for line in rules.warnings(settings, specs)
    ]
    if not broken:
        return [Check(True, "configuration is valid"), *dormant]
    return [Check(False, "configuration is valid", masker.mask(line)) for line in broken] + dormant
