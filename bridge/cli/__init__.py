"""The ``jazz-bridge`` operator command line, one module per command group.

:mod:`.parser` builds the argument parser and dispatches to a command; each command group
has its module (serve, init, repair, homes, removal, config check, doctor, whose checks
are in :mod:`.checks`); :mod:`.root_choice` and :mod:`.served` find the root a command
acts on and the settings it was served with. ``python -m bridge.cli`` runs it as the
console script does.
"""

from __future__ import annotations

from .console import setup_logging
from .parser import EXIT_CONFIG, EXIT_ERROR, build_parser, main

__all__ = ["EXIT_CONFIG", "EXIT_ERROR", "build_parser", "main", "setup_logging"]
