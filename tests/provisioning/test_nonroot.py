"""The non-root path, for real: the CLI run as an unprivileged account (nobody)."""

from __future__ import annotations

import grp
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from accounts_support import needs_root

NOBODY = 65534


def _as_nobody(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    return subprocess.run(
        ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", "--", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def nobody_dir(tmp_path: Path) -> Path:
    for parent in [tmp_path, *tmp_path.parents]:
        if parent in (Path("/tmp"), Path("/")):
            break
        os.chmod(parent, 0o755)
    work = tmp_path / "nobody"
    work.mkdir()
    os.chown(work, NOBODY, NOBODY)
    probe = _as_nobody(sys.executable, "-c", "import bridge.cli", cwd=work)
    if probe.returncode != 0:
        pytest.skip(f"the test interpreter is not usable by nobody: {probe.stderr[-200:]}")
    return work


@needs_root
def test_homes_ensure_without_root_is_private(nobody_dir: Path) -> None:
    cli = [sys.executable, "-m", "bridge.cli"]
    init = _as_nobody(*cli, "init", "--root", str(nobody_dir / "root"), "--json", cwd=nobody_dir)
    assert init.returncode == 0, init.stderr
    out = _as_nobody(
        *cli,
        "homes",
        "ensure",
        "telegram:-100:42",
        "--root",
        str(nobody_dir / "root"),
        "--json",
        cwd=nobody_dir,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["isolated"] is False
    assert data["uid"] == NOBODY
    home = Path(data["path"])
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "config.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "workspace").stat().st_mode) == 0o700
    assert "not running as root" in out.stderr  # said once, plainly


@needs_root
def test_isolation_on_without_root_is_refused(nobody_dir: Path) -> None:
    out = _as_nobody(
        sys.executable,
        "-m",
        "bridge.cli",
        "homes",
        "ensure",
        "web:x",
        "--root",
        str(nobody_dir / "root"),
        cwd=nobody_dir,
    )
    assert out.returncode == 0
    env_on = subprocess.run(
        [
            "setpriv",
            "--reuid",
            str(NOBODY),
            "--regid",
            str(NOBODY),
            "--clear-groups",
            "--",
            sys.executable,
            "-m",
            "bridge.cli",
            "homes",
            "ensure",
            "web:x",
            "--root",
            str(nobody_dir / "root"),
        ],
        cwd=nobody_dir,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "JAZZ_BRIDGE_ISOLATION": "on"},
    )
    assert env_on.returncode == 2
    assert "needs root" in env_on.stderr


@needs_root
def test_a_reader_outside_the_operator_group_is_told_how_to_join(nobody_dir: Path) -> None:
    """An operator not (yet) in the group: the denied path and the way in, not a bare errno."""
    root = nobody_dir / "gw-root"
    made = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "homes", "ensure", "web:x", "--root", str(root)],
        env={**os.environ, "JAZZ_BRIDGE_ISOLATION": "off"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    (root / "state" / "bridge.db").touch()
    group = grp.getgrgid(os.stat(root).st_gid).gr_name
    out = _as_nobody(
        sys.executable, "-m", "bridge.cli", "homes", "list", "--root", str(root), cwd=nobody_dir
    )
    assert out.returncode == 2, out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith(f"jazz-bridge: error: permission denied: {root / 'state'}"), line
    assert f"operator group {group!r}" in line and f"newgrp {group}" in line, line
