"""``jazz-bridge doctor`` run by a member of the operator group (not root) on the root a
root gateway made: it must judge the homes by the root's own rules (isolated: ``2750
conv:O``), not by whether *its own* process could switch users.

Real accounts (the operator group fixture's member), the real CLI in a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from accounts_support import OperatorGroup, needs_root

REPO = Path(__file__).resolve().parents[2]


def _root_env(root: Path, group: OperatorGroup, uid_range: tuple[int, int]) -> dict[str, str]:
    return {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "JAZZ_BRIDGE_ROOT": str(root),
        "JAZZ_BRIDGE_OPERATOR_GROUP": group.name,
        "JAZZ_BRIDGE_ACCOUNTS__UID_MIN": str(uid_range[0]),
        "JAZZ_BRIDGE_ACCOUNTS__UID_MAX": str(uid_range[1]),
        "JAZZ_BRIDGE_LOG__FORMAT": "text",
    }


def _as_member(group: OperatorGroup, argv: list[str], env: dict[str, str], cwd: Path):
    switch = [
        "setpriv",
        f"--reuid={group.member_uid}",
        f"--regid={group.gid}",
        f"--groups={group.gid}",
        "--",
    ]
    return subprocess.run(
        [*switch, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def _interpreter_for(group: OperatorGroup, cwd: Path) -> tuple[list[str], dict[str, str]]:
    """A Python the operator account can run with this checkout importable: the test's own
    when others may execute it, else the system's of the same version with our site-packages
    (the venv's interpreter may live under /root)."""
    site = sysconfig.get_paths()["purelib"]
    candidates = [
        ([sys.executable], {"PYTHONPATH": str(REPO)}),
        (["/usr/bin/python3"], {"PYTHONPATH": f"{REPO}:{site}"}),
    ]
    for argv, extra in candidates:
        probe = _as_member(
            group, [*argv, "-c", "import bridge.cli"], {"PATH": "/usr/bin:/bin", **extra}, cwd
        )
        if probe.returncode == 0:
            return argv, extra
    pytest.skip("no Python usable by a non-root operator account here")


@needs_root
def test_doctor_as_an_operator_judges_isolated_homes_by_the_roots_rules(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int], tmp_path: Path
) -> None:
    env = _root_env(shared_root, operator_group, uid_range)
    made = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "homes", "ensure", "slack:T0:C0:1.1"],
        env={**env, "PYTHONPATH": str(REPO)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    home = Path(made.stdout.strip())
    assert oct(os.lstat(home).st_mode & 0o7777) == "0o2750"  # exactly as DESIGN says

    # as root, doctor is happy with that home
    as_root = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "doctor"],
        env={**env, "PYTHONPATH": str(REPO)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert f"OK   home {home.name} 2750" in as_root.stdout, as_root.stdout

    # an operator (member of the group, not root) asks the same doctor about the same root
    python, extra = _interpreter_for(operator_group, tmp_path)
    done = _as_member(
        operator_group,
        [*python, "-m", "bridge.cli", "doctor"],
        {**env, **extra},
        tmp_path,
    )
    home_lines = [line for line in done.stdout.splitlines() if f"home {home.name}" in line]
    assert home_lines, done.stdout + done.stderr
    # the home is exactly right; the operator must not be told it is broken ("want 0700")
    assert not any(line.startswith("FAIL") for line in home_lines), home_lines
