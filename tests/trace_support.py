"""Counting the work a function does, for tests that guard against quadratic slow-downs.

Its own module, not ``conftest``: tests in several directories import it by name. A line
count is the same on any machine; a time would measure the machine (speed is measured in
``bench/``, never asserted in a test).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType, ModuleType
from typing import Any


def lines_run(fn: Callable[[], object], module: ModuleType) -> int:
    """How many lines of ``module`` ran during ``fn()``."""
    count = 0

    def local(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        count += event == "line"
        return local

    def calls(frame: FrameType, event: str, arg: object) -> Any:
        return local if frame.f_code.co_filename == module.__file__ else None

    sys.settrace(calls)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count
