"""Finding adapters: every entry point in the ``jazz_bridge.adapters`` group is a spec.

Adding a platform is one package plus one entry-point line; a third party can ship one
without touching this repository.
"""

from __future__ import annotations

import logging
from importlib.metadata import entry_points

from .errors import AdapterError
from .ports import AdapterSpec

log = logging.getLogger(__name__)

GROUP = "jazz_bridge.adapters"


def load_specs() -> dict[str, AdapterSpec]:
    specs: dict[str, AdapterSpec] = {}
    for ep in entry_points(group=GROUP):
        try:
            spec = ep.load()
        except Exception as exc:
            raise AdapterError(f"adapter entry point {ep.name} ({ep.value}) failed: {exc}") from exc
        if not isinstance(spec, AdapterSpec):
            raise AdapterError(f"adapter entry point {ep.name} ({ep.value}) is not an AdapterSpec")
        if spec.section in specs:
            raise AdapterError(f"two adapters claim the config section [{spec.section}]")
        specs[spec.section] = spec
    return specs
