"""The ``jazz-bridge`` console script: a Ctrl-C at any moment exits quietly with 130.

:mod:`bridge.cli` imports pydantic and the adapters' settings before its ``main`` can catch
anything, which takes a good part of a second; a Ctrl-C then printed a KeyboardInterrupt
traceback. This module imports nothing but the standard library's ``sys`` until it is inside
its ``try``, so an interrupt while the command line loads is caught too.
"""

from __future__ import annotations

import sys

INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C


def main() -> int:
    try:
        from .cli import main as cli_main

        return cli_main()
    except KeyboardInterrupt:
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
