"""The ``jazz-bridge`` operator command line, one module per command group.

:mod:`.parser` builds the argument parser and dispatches to a command; each command group
has its module (serve, init, repair, homes, config check, doctor, whose checks are in
:mod:`.checks`). ``python -m bridge.cli`` runs it as the console script does.
"""

from __future__ import annotations

from .console import setup_logging
from .parser import EXIT_CONFIG, EXIT_ERROR, build_parser, main

__all__ = ["EXIT_CONFIG", "EXIT_ERROR", "build_parser", "main", "setup_logging"]
