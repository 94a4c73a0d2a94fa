"""What the HTTP side's tests (``bridge/http/``) import: the gateway harness of
``tests/bridge`` and the fault suite's ``faults_support`` (the real ``jazz-bridge serve``).

Their directories go on ``sys.path`` here, once, before any test module of this directory is
imported (there are no packages under ``tests/``: modules are imported by base name). Each
end-to-end module keeps its own ``env`` fixture: ``tests/conftest.py`` keeps a module in
the ``JB_TEST_RUNNER=released`` session by what its text says (``gateway_env``).
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
for extra in (TESTS / "bridge", TESTS / "faults"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))
