"""The configuration rules ``serve`` starts by, applied the same way by every command.

Some rules cannot be said by the settings' types: an adapter needs an allowlist, or the
secret its mode uses, and at least one adapter must be on. Each is stated once: an adapter's
by its spec (:attr:`~bridge.ports.AdapterSpec.check`), the core's here. ``serve`` refuses to
start on any of them before it provisions anything, ``config check`` exits 78 (EX_CONFIG)
with the same line, and ``doctor`` reports each as a failed check, so what an operator
checked is what the gateway runs with. A section configured but left off by a missing
credential is a warning (:func:`warnings`): serve logs it, ``config check`` and ``doctor``
show it, none fails. They are not pydantic validators: a settings object that breaks one is
still a valid value (tests build such objects), just not one the gateway starts with.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from .config import CoreSettings
from .errors import AdapterError
from .ports import AdapterSpec

log = logging.getLogger("jazz_bridge")

NO_ADAPTER = "no adapter is enabled: enable [web] or configure Slack/Telegram"


def enabled_adapters(
    settings: CoreSettings, specs: dict[str, AdapterSpec]
) -> list[tuple[AdapterSpec, Any]]:
    """Each adapter switched on, with its settings section, in section order."""
    found = []
    for section, spec in sorted(specs.items()):
        section_settings = settings.section(section)
        if section_settings is not None and spec.enabled(section_settings):
            found.append((spec, section_settings))
    return found


def problems(settings: CoreSettings, specs: dict[str, AdapterSpec]) -> list[str]:
    """Every rule the configuration breaks, one actionable line each (none: serve starts).

    Only enabled adapters are checked: an adapter that is off needs none of its settings.
    """
    enabled = enabled_adapters(settings, specs)
    if not enabled:
        return [NO_ADAPTER]
    found: list[str] = []
    for spec, section_settings in enabled:
        if spec.check is not None:
            found += spec.check(section_settings, settings)
    return found


def warnings(settings: CoreSettings, specs: dict[str, AdapterSpec]) -> list[str]:
    """Each adapter section that holds settings but stays off (a Telegram section with an
    allowlist and no token), one line each naming the missing key and its variable.

    A warning, not a refusal: the credential is what switches an adapter on, so a section
    without it is off by the same rule that keeps an untouched one off; but an operator who
    set its allowlist most likely meant it on.
    """
    found: list[str] = []
    for section, spec in sorted(specs.items()):
        section_settings = settings.section(section)
        if section_settings is None or spec.dormant is None:
            continue
        if not spec.enabled(section_settings):
            found += spec.dormant(section_settings)
    return found


def refuse(broken: Sequence[str]) -> None:
    """Raise :class:`AdapterError` naming every rule in ``broken``, one per line; else return."""
    if broken:
        raise AdapterError("\n".join(broken))


def require(settings: CoreSettings, specs: dict[str, AdapterSpec]) -> None:
    """Refuse a configuration ``serve`` would not start with (``serve``, ``config check``);
    first log a warning for each configured section that stays off (:func:`warnings`)."""
    for line in warnings(settings, specs):
        log.warning("%s", line)
    refuse(problems(settings, specs))
