"""``python -m bridge.cli``: the command line as the ``jazz-bridge`` console script runs it
(the tests, the container and the systemd unit's checks start it this way)."""

from __future__ import annotations

import sys

from .parser import main

sys.exit(main())
