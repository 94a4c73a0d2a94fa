"""The ``jazz-bridge`` console script (:mod:`bridge.entry`): a Ctrl-C while the command
line's imports load exits quietly with 130, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


# Ctrl-C while the command line's imports load (pydantic first): the console script's target
# must catch it, not leave it to the interpreter's traceback.
INTERRUPT_WHILE_IMPORTING = """
import importlib, sys, tomllib
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "pydantic":
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, Interrupt())
target = tomllib.load(open(sys.argv[1], "rb"))["project"]["scripts"]["jazz-bridge"]
module, _, func = target.partition(":")
sys.argv[1:] = ["config", "check"]
sys.exit(getattr(importlib.import_module(module), func)())
"""


def test_ctrl_c_while_loading_exits_quietly(tmp_path: Path) -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["jazz-bridge"].endswith(":main")
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPT_WHILE_IMPORTING, str(REPO / "pyproject.toml")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr == "" and done.stdout == ""
