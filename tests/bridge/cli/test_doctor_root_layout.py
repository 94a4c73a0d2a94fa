"""``jazz-bridge doctor`` on a root whose ``archive/``, ``state/`` or ``tools/`` is wrong.

An operator short of space moves ``archive/`` to a bigger disk and leaves a symbolic link
in its place. ``serve`` (and ``repair``, ``homes archive``) then refuse to start: "archive
is a symbolic link or not a directory". Doctor looked only at the root, ``chats/`` and
``personas/``, printed every line OK and exited 0: the one command meant to say what is
wrong passed a root the gateway will not run on. It now checks every directory of the
root, as serve takes them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.mark.parametrize("name", ["archive", "state", "tools"])
def test_doctor_fails_a_root_serve_refuses(tmp_path: Path, name: str, cli: Cli) -> None:
    assert cli(tmp_path, "init").returncode == 0
    moved = tmp_path / "bigdisk" / name
    moved.parent.mkdir()
    (tmp_path / "root" / name).rename(moved)
    (tmp_path / "root" / name).symlink_to(moved)
    refused = cli(tmp_path, "repair")  # as serve: the root's own set-up refuses it
    assert refused.returncode == 2 and "symbolic link" in refused.stderr, refused.stderr

    done = cli(tmp_path, "doctor")

    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stdout
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
    assert any(str(tmp_path / "root" / name) in line for line in failed), done.stdout


def test_doctor_names_a_state_directory_others_may_read(tmp_path: Path, cli: Cli) -> None:
    assert cli(tmp_path, "init").returncode == 0
    (tmp_path / "root" / "state").chmod(0o2755)  # bridge.db readable by every account
    done = cli(tmp_path, "doctor")
    assert done.returncode == 1, done.stdout
    assert any(
        line.startswith("FAIL") and "state" in line and "2755" in line
        for line in done.stdout.splitlines()
    ), done.stdout
