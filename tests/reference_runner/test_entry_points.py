"""The runner starts as a program: the console script, ``-m``, and what ``main`` refuses.

(:mod:`reference_runner.cli` and :mod:`reference_runner.__main__`.)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from reference_support import Runner, argv, prompt

from reference_runner.bundle import PACKAGE


def test_the_console_script_speaks_the_contract_too(spawn: Any) -> None:
    script = Path(sys.executable).with_name("jazz-reference-runner")
    if not script.exists():
        pytest.skip("console script not installed")
    res = spawn(prompt("hi"), command=[str(script)]).finish()
    assert res.code == 0 and "not an AI" in res.answer


def test_missing_home_and_missing_input_stdin(spawn: Any, tmp_path: Path) -> None:
    res = spawn(prompt("x"), home=None).finish()
    assert res.code == 1 and res.envelope is not None and "JAZZ_HOME" in res.envelope["error"]
    res = spawn(prompt("x"), home=None, extra=("--data-dir", str(tmp_path / "d"))).finish()
    assert res.code == 0 and (tmp_path / "d" / "history").is_dir()
    runner = Runner(tmp_path, [a for a in argv() if a != "--input-stdin"])
    try:
        runner.send(prompt("x"))
        res = runner.finish()
    finally:
        runner.kill()
    assert res.code == 1 and res.envelope is not None and "--input-stdin" in res.envelope["error"]


def test_the_package_directory_runs_with_no_site_packages_from_anywhere(
    spawn: Any, tmp_path: Path
) -> None:
    """``python path/to/reference_runner``, as the gateway starts it when it writes no copy:
    stdlib only (``-S``: not even the gateway's site-packages) and from any directory."""
    command = [sys.executable, "-S", str(PACKAGE)]
    res = spawn(prompt("hi !tools 1"), command=command, cwd=tmp_path).finish()
    assert res.code == 0 and "not an AI" in res.answer
    assert res.envelope is not None and len(res.envelope["toolCalls"]) == 1
