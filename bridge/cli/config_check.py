"""``jazz-bridge config check``: the configuration held to serve's rules, then printed.

What serve would refuse to start with is refused with the same line; what it would run with
is printed, every configured secret masked.
"""

from __future__ import annotations

import argparse
import logging

from ..config import CoreSettings, effective_config
from ..errors import AdapterError, ConfigError
from ..ports import AdapterSpec
from .console import dump

log = logging.getLogger("jazz_bridge")


def cmd_config(
    args: argparse.Namespace, settings: CoreSettings, specs: dict[str, AdapterSpec]
) -> int:
    from ..rules import require

    try:
        require(settings, specs)  # what serve would refuse to start with: the same line
    except AdapterError as exc:  # a rule of the configuration: a configuration error
        raise ConfigError(str(exc)) from None
    source = getattr(settings, "_toml_file", None)
    log.info("configuration is valid (file: %s)", source or "none, defaults and environment")
    dump(effective_config(settings))
    return 0
