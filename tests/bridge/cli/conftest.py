"""Fixtures of the operator CLI's tests: the real ``jazz-bridge`` run in a subprocess, as an
operator runs it (``gateway_harness.run_cli``), in a small environment of its own.

Helpers are fixtures here, not imports: a ``conftest`` module cannot be imported by name
(see tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/bridge: gateway_harness
from gateway_harness import run_cli

REPO = Path(__file__).resolve().parents[3]

Cli = Callable[..., subprocess.CompletedProcess[str]]


def operator_env(cwd: Path) -> dict[str, str]:
    """What the CLI runs with: a plain PATH, this checkout importable, isolation off, the root
    ``cwd/root``, any free port, text log lines, the records of the root served under
    ``cwd/xdg-state`` (never /var/lib/jazz-bridge)."""
    return {
        "XDG_STATE_HOME": str(cwd / "xdg-state"),
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
    :func:`operator_env` and ``env`` on top (nothing of the test's own environment); a
    variable given as None is left out (``JAZZ_BRIDGE_ROOT=None``: no root in the
    environment)."""

    def run(
        cwd: Path, *args: str, timeout: float = 120, **env: str | None
    ) -> subprocess.CompletedProcess[str]:
        return run_cli(_env(cwd, env), *args, timeout=timeout, cwd=cwd, inherit=False)

    return run


def _env(cwd: Path, env: dict[str, str | None]) -> dict[str, str]:
    merged: dict[str, str | None] = {**operator_env(cwd), **env}
    return {k: v for k, v in merged.items() if v is not None}


Serving = Callable[..., contextlib.AbstractContextManager[subprocess.Popen[str]]]


@pytest.fixture
def serving() -> Serving:
    """``with serving(cwd, **env) as proc``: a real ``jazz-bridge serve`` (as :func:`cli`
    runs commands), entered once it logs that it listens (so it holds its root and has
    recorded it), stopped with SIGTERM on leaving. ``command``: how ``jazz-bridge`` is run
    (another account's ``setpriv ... python -m bridge.cli``)."""

    @contextlib.contextmanager
    def serve(
        cwd: Path, *, command: list[str] | None = None, **env: str | None
    ) -> Iterator[subprocess.Popen[str]]:
        proc = subprocess.Popen(
            [*(command or [sys.executable, "-m", "bridge.cli"]), "serve"],
            cwd=cwd,
            env=_env(cwd, env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        seen: list[str] = []
        try:
            for line in proc.stderr:  # ends at EOF: a serve that died says why below
                seen.append(line)
                if "jazz-bridge listening on" in line:
                    break
            else:
                raise AssertionError("serve ended before it listened:\n" + "".join(seen))
            yield proc
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)

    return serve


def last_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    return done.stderr.strip().splitlines()[-1]


@pytest.fixture
def error_line() -> Callable[[subprocess.CompletedProcess[str]], str]:
    """``error_line(done)``: the last line on stderr (the one ``jazz-bridge: error:``), no
    traceback before it."""
    return last_error_line
