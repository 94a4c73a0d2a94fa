"""The run's home: history per conversation, Jazz's modes, and a home it cannot write.

(:mod:`reference_runner.home`.)

A fresh machine's first run can meet a ``JAZZ_HOME`` the run's account cannot write (a
root made by another user, a read-only mount) or a home whose ``workspace`` is not a
directory. The person in the chat then reads the runner's error; it must say which path and
why, not ``PermissionError(13, 'Permission denied')``, and it must come before the run asks
anyone to approve anything it can never finish.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from reference_support import Result, Runner, argv, mode, once, prompt

from reference_runner.home import safe_name

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
    python = [sys.executable, "-m", "reference_runner"]
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


def test_history_grows_per_conversation_and_keys_are_separate(spawn: Any, tmp_path: Path) -> None:
    key = "slack:T1:C2:1700000000.000100#1"
    assert "Earlier turns in this conversation: 0." in once(spawn, "one", conversation=key).answer
    assert "Earlier turns in this conversation: 1." in once(spawn, "two", conversation=key).answer
    other = once(spawn, "three", conversation="slack:T1:C2:1700000000.000100#2")
    assert "Earlier turns in this conversation: 0." in other.answer  # a new epoch starts fresh
    files = sorted((tmp_path / "history").iterdir())
    assert len(files) == 2
    for f in files:
        assert all(c in "abcdefghijklmnopqrstuvwxyz0123456789._-" for c in f.name)
    history = json.loads((tmp_path / "history" / f"{safe_name(key)}.json").read_text())
    assert [h["role"] for h in history] == ["user", "assistant", "user", "assistant"]
    assert [h["content"] for h in history[::2]] == ["one", "two"]
    assert not [p for p in (tmp_path / "history").iterdir() if ".tmp-" in p.name]


def test_safe_names_are_distinct_and_safe() -> None:
    a, b = safe_name("A:b/../c"), safe_name("a:b/../c")
    assert a != b and "/" not in a and ".." not in a.split("-")[0]
    assert safe_name("").startswith("conversation-")


def test_ephemeral_takes_history_from_stdin_and_saves_nothing(spawn: Any, tmp_path: Path) -> None:
    history = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}] * 2
    res = spawn(prompt("x", history=history), conversation=None, extra=("--ephemeral",)).finish()
    assert "Earlier turns in this conversation: 2." in res.answer
    assert not (tmp_path / "history").exists()


def test_corrupt_history_is_moved_aside(spawn: Any, tmp_path: Path) -> None:
    (tmp_path / "history").mkdir(mode=0o700)
    path = tmp_path / "history" / f"{safe_name('web:T1#1')}.json"
    path.write_text("{not json")
    res = once(spawn, "hi")
    assert "Earlier turns in this conversation: 0." in res.answer
    assert [p.name for p in path.parent.iterdir() if ".corrupt-" in p.name]
    assert any("moved to" in line for line in res.stderr)


def test_modes_in_a_private_home(spawn: Any, tmp_path: Path) -> None:
    once(spawn, "hi !artifact note.txt", umask=0o000)
    (history,) = (tmp_path / "history").iterdir()
    assert mode(history) == 0o600 and mode(tmp_path / "history") == 0o700
    assert mode(tmp_path / "workspace" / "note.txt") == 0o600


def test_modes_in_a_setgid_home_keep_group_read(spawn: Any, tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o2750)
    once(spawn, "hi !artifact plot.png", umask=0o077)  # the umask must not take group read
    (history,) = (tmp_path / "history").iterdir()
    assert mode(history) == 0o640
    assert mode(tmp_path / "history") == 0o2750  # setgid inherited, other bits cleared
    assert mode(tmp_path / "workspace" / "plot.png") == 0o640
