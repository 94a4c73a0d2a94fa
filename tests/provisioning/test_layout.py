"""A gateway root made by ``init``: exact modes and owners, its operator group, refusals, and
what an operator outside that group is told."""

from __future__ import annotations

import grp
import os
import subprocess
import sys
from pathlib import Path

import pytest
from accounts_support import OperatorGroup, needs_root
from home_support import as_nobody, mode, owner

from provisioning.errors import LayoutError, OperatorGroupError
from provisioning.layout import init_root


def test_init_creates_exact_modes_and_is_idempotent(tmp_path: Path) -> None:
    root = tmp_path / "r"
    info = init_root(root)
    assert mode(root) == 0o2751
    assert mode(root / "chats") == 0o2751
    assert mode(root / "personas") == 0o755
    assert mode(root / "state") & 0o007 == 0
    os.chmod(root, 0o777)
    os.chmod(root / "chats", 0o700)
    again = init_root(root)
    assert (mode(root), mode(root / "chats")) == (0o2751, 0o2751)
    assert again.operator_gid == info.operator_gid


def test_init_refuses_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(LayoutError, match="symbolic link"):
        init_root(tmp_path / "link")


def test_init_refuses_unknown_operator_group(tmp_path: Path) -> None:
    with pytest.raises(OperatorGroupError, match="does not exist"):
        init_root(tmp_path / "r", "no-such-group-jb")


@needs_root
def test_init_refuses_a_root_owned_by_another_account(tmp_path: Path) -> None:
    root = tmp_path / "theirs"
    root.mkdir()
    os.chown(root, 65534, 65534)
    with pytest.raises(LayoutError, match="owned by uid 65534"):
        init_root(root)


@needs_root
def test_operator_group_defaults_to_the_roots_group(
    tmp_path: Path, operator_group: OperatorGroup
) -> None:
    root = tmp_path / "r"
    root.mkdir()
    os.chown(root, 0, operator_group.gid)
    info = init_root(root)
    assert info.operator_gid == operator_group.gid
    assert owner(root) == (0, operator_group.gid)
    assert owner(root / "chats") == (0, operator_group.gid)


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
    out = as_nobody(
        sys.executable, "-m", "bridge.cli", "homes", "list", "--root", str(root), cwd=nobody_dir
    )
    assert out.returncode == 2, out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith(f"jazz-bridge: error: permission denied: {root / 'state'}"), line
    assert f"operator group {group!r}" in line and f"newgrp {group}" in line, line
