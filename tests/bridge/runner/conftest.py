"""Fixtures of the runner backends' tests (``bridge/runner/``).

The gateway's end-to-end helpers (``gateway_harness``, ``accounts_support``) live one
level up, in ``tests/bridge`` and ``tests``: that directory is put on the import path
here, for every test of this directory, instead of by each file.
"""

from __future__ import annotations

import sys
from pathlib import Path

BRIDGE_TESTS = Path(__file__).resolve().parents[1]
if str(BRIDGE_TESTS) not in sys.path:
    sys.path.insert(0, str(BRIDGE_TESTS))
