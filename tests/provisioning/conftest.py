"""Fixtures of the provisioning tests: a working directory for a gateway run as nobody, and a
``tmp_path`` removed with GNU rm for trees deeper than pytest's own removal goes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from home_support import NOBODY, as_nobody


@pytest.fixture
def nobody_dir(tmp_path: Path) -> Path:
    """A directory nobody owns, under parents nobody can traverse; skipped where the test
    interpreter (the gateway's code) is not usable by nobody."""
    for parent in [tmp_path, *tmp_path.parents]:
        if parent in (Path("/tmp"), Path("/")):
            break
        os.chmod(parent, 0o755)
    work = tmp_path / "nobody"
    work.mkdir()
    os.chown(work, NOBODY, NOBODY)
    probe = as_nobody(sys.executable, "-c", "import bridge.cli, provisioning.sandbox", cwd=work)
    if probe.returncode != 0:
        pytest.skip(f"the test interpreter is not usable by nobody: {probe.stderr[-200:]}")
    return work


@pytest.fixture
def deep_cleanup(tmp_path: Path) -> Iterator[None]:
    """Trees deeper than PATH_MAX: removed with GNU rm (pytest's rmtree recurses)."""
    yield
    subprocess.run(["rm", "-rf", "--", str(tmp_path)], check=False, timeout=120)
