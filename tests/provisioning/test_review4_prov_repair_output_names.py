"""A name the agent chose is shown escaped in what repair reports, never as raw bytes.

``jazz-bridge repair`` prints each failure with its path: one under a directory the
conversation named with a newline and a terminal escape (``x\\n  failed: ...\\x1b[2J``)
printed a forged failure line of the agent's choosing and cleared the operator's
terminal. The walk's messages now show such characters escaped (``\\n``, ``\\x1b``,
``\\xff``), so one failure is one line, and what it names can be found.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import OperatorGroup, needs_root

from provisioning.accounts import AccountRegistry
from provisioning.homes import Homes
from provisioning.layout import init_root
from provisioning.walk import MAX_DEPTH, repair_home_tree

HOSTILE = b"x\n  failed: forged line\x1b[2J\xff"


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "r"
    subprocess.run(["rm", "-rf", "--", str(tmp_path)], check=False, timeout=120)


def _too_deep_under(parent: Path, first: bytes) -> None:
    """``first`` then plain levels, deeper than the walk goes (so the walk fails there)."""
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in [first] + [b"d"] * (MAX_DEPTH + 1):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


def test_a_hostile_name_is_escaped_in_repair_output(root: Path) -> None:
    info = init_root(root)
    home = Homes(info, isolated=False).ensure("web:names")
    _too_deep_under(home.path / "workspace", HOSTILE)

    report = repair_home_tree(home.path, setgid_home=False, owner_uid=os.geteuid(), force=True)
    assert report.failed == 1
    (error,) = report.errors
    assert error.isprintable(), error
    assert "x\\n  failed: forged line\\x1b[2J\\xff/d/" in error

    out = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "repair", "--root", str(root), "--deep"],
        env={**os.environ, "JAZZ_BRIDGE_ISOLATION": "off"},
        capture_output=True,
        timeout=120,
    )
    assert out.returncode == 1, out.stderr
    lines = out.stdout.decode("utf-8").splitlines()
    assert [line for line in lines if "failed:" in line and not line.startswith("repaired")] == [
        line for line in lines if line.startswith("  failed: ")
    ]
    assert len([line for line in lines if line.startswith("  failed: ")]) == 1
    assert b"\x1b" not in out.stdout and b"\xff" not in out.stdout


@needs_root
def test_a_hostile_name_left_behind_by_a_handover_is_logged_escaped(
    shared_root: Path,
    operator_group: OperatorGroup,
    uid_range: tuple[int, int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The handover names what it leaves the gateway's (on a terminal, the log is text)."""
    info = init_root(shared_root, operator_group.name)
    trial = Homes(info, isolated=False).ensure("web:names-handover")  # isolation off: root's
    workspace = os.fsencode(trial.path / "workspace")
    fifo = os.path.join(workspace, HOSTILE)
    os.mkfifo(fifo)
    linked = os.path.join(workspace, b"a\x1b]0;owned\x07")
    with open(linked, "w") as fh:
        fh.write("x")
    os.link(linked, os.path.join(workspace, b"b"))
    caplog.set_level(logging.INFO, logger="provisioning.handover")
    registry = AccountRegistry(info.layout, info.operator_gid, uid_range)
    Homes(info, isolated=True, registry=registry).ensure("web:names-handover")
    named = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("x\\n  failed: forged line\\x1b[2J\\xff" in m for m in named), named
    assert any("a\\x1b]0;owned\\x07" in m for m in named), named
    assert all(m.isprintable() for m in named), named
