"""The reference runner with a home it cannot write: a clear error naming the path, at once.

A fresh machine's first run can meet a ``JAZZ_HOME`` the run's account cannot write (a
root made by another user, a read-only mount) or a home whose ``workspace`` is not a
directory. The person in the chat then reads the runner's error; it must say which path and
why, not ``PermissionError(13, 'Permission denied')``, and it must come before the run asks
anyone to approve anything it can never finish.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from test_reference_runner import Result, Runner, argv, prompt

IS_ROOT = os.geteuid() == 0
AS_NOBODY = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", "--"]


def _unwritable_parent(tmp_path: Path) -> Path:
    """A directory the runner's account can traverse but not write into."""
    for parent in [tmp_path, *tmp_path.parents]:
        if parent in (Path("/tmp"), Path("/")):
            break
        os.chmod(parent, 0o755)  # pytest's base is 0700: let nobody traverse to it
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o755)
    os.chmod(locked, 0o555)
    return locked


def _once(home: Path, text: str, command: list[str] | None = None) -> Result:
    runner = Runner(home, argv(), command=command)
    try:
        runner.send(prompt(text))
        return runner.finish()
    finally:
        runner.kill()


def _command() -> list[str]:
    python = [sys.executable, "-m", "bridge.reference_runner"]
    return [*AS_NOBODY, *python] if IS_ROOT else python


def test_an_unwritable_home_is_named_before_anyone_is_asked(tmp_path: Path) -> None:
    home = _unwritable_parent(tmp_path) / "home"
    res = _once(home, "!approve bash", command=_command())
    print(res.envelope)
    assert res.code == 1 and res.envelope is not None and res.envelope["ok"] is False
    error = res.envelope["error"]
    assert str(home) in error and "JAZZ_HOME" in error, error
    assert "approval_required" not in res.types  # nobody is asked for a run that cannot save


def test_an_artifact_that_cannot_be_written_names_its_path(tmp_path: Path) -> None:
    (tmp_path / "workspace").write_text("a file where the workspace directory should be")
    res = _once(tmp_path, "!artifact plot.png")
    print(res.envelope)
    # like a real agent's tool that failed: the turn goes on and says which path and why
    assert res.code == 0 and res.envelope is not None, res.envelope
    assert str(tmp_path / "workspace") in res.answer and "Not a directory" in res.answer
    assert res.envelope["artifacts"] == []


def test_a_home_that_is_a_file_is_named(tmp_path: Path) -> None:
    home = tmp_path / "not-a-dir"
    home.write_text("x")
    res = _once(home, "hi")
    assert res.code == 1 and res.envelope is not None and str(home) in res.envelope["error"]
