"""``jazz-bridge doctor`` run by someone who cannot list the homes.

``chats/`` is ``2751``: only the gateway's account and the operator group may list it. Run
by anyone else (an admin not yet in the group, a new login without ``newgrp``) on a
single-account root, doctor could not see a single home, checked none, and printed every
line OK with exit 0: a clean bill of health for homes it never looked at. It now fails a
check saying the homes could not be read and how to become able to.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from accounts_support import needs_root

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534  # in no operator group


def _as_nobody(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    switch = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    return subprocess.run(
        [*switch, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def _interpreter(cwd: Path) -> tuple[list[str], dict[str, str]]:
    """A Python nobody can run with this checkout importable (the venv's may live under
    /root): the test's own, else the system's of the same version with our site-packages."""
    site = sysconfig.get_paths()["purelib"]
    for argv, extra in (
        ([sys.executable], {"PYTHONPATH": str(REPO)}),
        (["/usr/bin/python3"], {"PYTHONPATH": f"{REPO}:{site}"}),
    ):
        probe = _as_nobody(
            [*argv, "-c", "import bridge.cli"], {"PATH": "/usr/bin:/bin", **extra}, cwd
        )
        if probe.returncode == 0:
            return argv, extra
    pytest.skip("no Python usable by nobody here")


@needs_root
def test_doctor_that_cannot_list_the_homes_does_not_pass(tmp_path: Path) -> None:
    for parent in [tmp_path, *tmp_path.parents]:
        if parent in (Path("/tmp"), Path("/")):
            break
        os.chmod(parent, 0o755)  # nobody may reach the root, as an admin can
    env = {
        "PATH": "/usr/bin:/bin",
        "JAZZ_BRIDGE_ROOT": str(tmp_path / "root"),
        "JAZZ_BRIDGE_ISOLATION": "off",
        "JAZZ_BRIDGE_LOG__FORMAT": "text",
    }
    made = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "homes", "ensure", "web:demo"],
        env={**env, "PYTHONPATH": str(REPO)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    python, extra = _interpreter(tmp_path)

    done = _as_nobody([*python, "-m", "bridge.cli", "doctor"], {**env, **extra}, tmp_path)

    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stdout + done.stderr
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
    assert any(str(tmp_path / "root" / "chats") in line for line in failed), done.stdout
    assert any("operator group" in line for line in failed), failed
