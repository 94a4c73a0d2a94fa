"""``jazz-bridge init``: which directories it takes for a root (a new, an empty one, a new
volume's, its own) and which it refuses with one line naming them (one holding other
things, a path under a file), leaving them as they were."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

Cli = Callable[..., subprocess.CompletedProcess[str]]
ErrorLine = Callable[[subprocess.CompletedProcess[str]], str]

SERVE_TIMEOUT_S = 60  # serve refusing returns at once; one that starts would run until this


def test_init_does_not_take_over_a_directory_holding_other_things(
    tmp_path: Path, cli: Cli, error_line: ErrorLine
) -> None:
    """``jazz-bridge init --root /tmp`` (or a mistyped /srv, /var/lib): init made it 2751
    and the operator group's, /tmp's sticky bit and everyone's access gone, with chats/,
    state/... among its files; serve and homes ensure made a root there the same way."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    (shared / "someone-elses.txt").write_text("not the gateway's")
    for command in (("init",), ("homes", "ensure", "web:x"), ("serve",)):
        done = cli(tmp_path, *command, timeout=SERVE_TIMEOUT_S, JAZZ_BRIDGE_ROOT=str(shared))
        assert done.returncode == 2, (command, done.stderr)
        line = error_line(done)
        assert str(shared) in line and "someone-elses.txt" in line, line
        assert stat.S_IMODE(shared.stat().st_mode) == 0o1777, command
        assert sorted(os.listdir(shared)) == ["someone-elses.txt"], command


def test_init_takes_an_empty_directory_a_new_volume_or_its_own_root(
    tmp_path: Path, cli: Cli
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    volume = tmp_path / "volume"  # a freshly made filesystem mounted for the root
    (volume / "lost+found").mkdir(parents=True)
    for root in (empty, volume):
        done = cli(tmp_path, "init", "--root", str(root))
        assert done.returncode == 0, done.stderr
        assert (root / "state").is_dir()
        again = cli(tmp_path, "init", "--root", str(root))  # idempotent on its own root
        assert again.returncode == 0, again.stderr
    # the gateway's own log file, made just before init runs
    logged = tmp_path / "logged"
    done = cli(tmp_path, "init", "--root", str(logged), JAZZ_BRIDGE_LOG__FILE=str(logged / "g.log"))
    assert done.returncode == 0, done.stderr


def test_a_root_under_a_file_is_named(tmp_path: Path, cli: Cli, error_line: ErrorLine) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = cli(tmp_path, "init", "--root", str(blocker / "sub"))
    assert done.returncode == 2
    assert error_line(done) == (
        f"jazz-bridge: error: {blocker / 'sub'}: {blocker} is a file, not a directory, so "
        "nothing can be made under it: pick another path (--root, root, JAZZ_BRIDGE_ROOT)"
    )
