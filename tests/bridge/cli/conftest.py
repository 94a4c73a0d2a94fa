"""Fixtures of the operator CLI's tests: the real ``jazz-bridge`` run in a subprocess, as an
operator runs it (``gateway_harness.run_cli``), in a small environment of its own.

Helpers are fixtures here, not imports: a ``conftest`` module cannot be imported by name
(see tests/conftest.py).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/bridge: gateway_harness
from gateway_harness import run_cli

REPO = Path(__file__).resolve().parents[3]

Cli = Callable[..., subprocess.CompletedProcess[str]]


def operator_env(cwd: Path) -> dict[str, str]:
    """What the CLI runs with: a plain PATH, this checkout importable, isolation off, the root
    ``cwd/root``, any free port, text log lines."""
    return {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "JAZZ_BRIDGE_ISOLATION": "off",
        "JAZZ_BRIDGE_ROOT": str(cwd / "root"),
        "JAZZ_BRIDGE_SERVER__PORT": "0",
        "JAZZ_BRIDGE_LOG__FORMAT": "text",
    }


@pytest.fixture
def cli() -> Cli:
    """``cli(cwd, *args, timeout=120, **env)``: ``jazz-bridge ARGS`` run in ``cwd`` with
    :func:`operator_env` and ``env`` on top (nothing of the test's own environment)."""

    def run(
        cwd: Path, *args: str, timeout: float = 120, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return run_cli({**operator_env(cwd), **env}, *args, timeout=timeout, cwd=cwd, inherit=False)

    return run


def last_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    return done.stderr.strip().splitlines()[-1]


@pytest.fixture
def error_line() -> Callable[[subprocess.CompletedProcess[str]], str]:
    """``error_line(done)``: the last line on stderr (the one ``jazz-bridge: error:``), no
    traceback before it."""
    return last_error_line
