"""Finding adapters: every entry point in the ``jazz_bridge.adapters`` group is a spec.

Adding a platform is one package plus one entry-point line; a third party can ship one
without touching this repository.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points

from .config import CoreSettings
from .errors import AdapterError
from .ports import AdapterSpec

log = logging.getLogger(__name__)

GROUP = "jazz_bridge.adapters"


def load_specs(found: Iterable[EntryPoint] | None = None) -> dict[str, AdapterSpec]:
    """Every adapter installed (``found``: the entry points, for tests).

    One that cannot be imported (a missing dependency) is skipped with a warning rather
    than stopping every command, ``repair`` before a start included: a section configured
    for it is then refused as unknown by the configuration, which names it.
    """
    specs: dict[str, AdapterSpec] = {}
    for ep in entry_points(group=GROUP) if found is None else found:
        try:
            spec = ep.load()
        except Exception as exc:
            log.warning("adapter %s (%s) is not loaded: %s", ep.name, ep.value, exc)
            continue
        if not isinstance(spec, AdapterSpec):
            raise AdapterError(f"adapter entry point {ep.name} ({ep.value}) is not an AdapterSpec")
        if spec.section in CoreSettings.model_fields:
            raise AdapterError(
                f"adapter entry point {ep.name} ({ep.value}) claims [{spec.section}], a section "
                "of the gateway's own; it must use another name"
            )
        if spec.section in specs:
            raise AdapterError(f"two adapters claim the config section [{spec.section}]")
        specs[spec.section] = spec
    return specs
