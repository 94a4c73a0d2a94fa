"""Fixtures of the runner backends' tests (``bridge/runner/``): a fake Jazz daemon and
the daemon backend on it (their helpers are in ``daemon_support``).

The gateway's end-to-end helpers (``gateway_harness``, ``accounts_support``) live one
level up, in ``tests/bridge`` and ``tests``: that directory is put on the import path
here, for every test of this directory, instead of by each file.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from daemon_support import make_request, settings
from fake_daemon import WAIT, FakeDaemon, serving

from bridge.runner.base import RunRequest
from bridge.runner.daemon import DaemonRunner

BRIDGE_TESTS = Path(__file__).resolve().parents[1]
if str(BRIDGE_TESTS) not in sys.path:
    sys.path.insert(0, str(BRIDGE_TESTS))


@pytest.fixture
async def daemon() -> AsyncIterator[FakeDaemon]:
    """A fake ``jazz daemon`` served on 127.0.0.1 for the test."""
    async with serving(FakeDaemon()) as fake:
        yield fake


@pytest.fixture
async def backend(daemon: FakeDaemon) -> AsyncIterator[DaemonRunner]:
    """The daemon backend on ``daemon``, closed (bounded) after the test."""
    runner = DaemonRunner(settings(daemon.url), stop_grace_s=2.0)
    try:
        yield runner
    finally:
        await asyncio.wait_for(runner.close(), WAIT)


@pytest.fixture
def request_(tmp_path: Path) -> RunRequest:
    """A daemon run's request for a conversation of the test's own account."""
    return make_request(tmp_path)
