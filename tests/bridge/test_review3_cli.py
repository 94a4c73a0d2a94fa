"""The operator CLI run as an operator runs it (a subprocess): what a script sees on stdout,
on stderr and in the exit code, and what is left on disk."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SERVE_TIMEOUT_S = 60  # serve refusing returns at once; one that starts would run until this


def cli(
    cwd: Path, *args: str, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(REPO),
            "JAZZ_BRIDGE_ISOLATION": "off",
            "JAZZ_BRIDGE_ROOT": str(cwd / "root"),
            "JAZZ_BRIDGE_SERVER__PORT": "0",
            **env,
        },
    )


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    return done.stderr.strip().splitlines()[-1]


# -- a root no gateway has served yet -----------------------------------------------------------


def test_a_root_made_by_init_lists_no_conversations(tmp_path: Path) -> None:
    """``init``, then ``homes list --json``: an empty list and exit 0, not "no gateway state
    ... is root right?" (exit 2) for a root that is right but has no database yet."""
    assert cli(tmp_path, "init").returncode == 0
    listed = cli(tmp_path, "homes", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []
    table = cli(tmp_path, "homes", "list")
    assert table.returncode == 0, table.stderr
    assert table.stdout.split()[:2] == ["threadKey", "platform"]  # the header, no rows
    assert len(table.stdout.splitlines()) == 1
    sweep = cli(tmp_path, "homes", "archive", "--idle-days", "30", "--json")
    assert sweep.returncode == 0, sweep.stderr
    assert json.loads(sweep.stdout) == []
    for command in (("homes", "show", "web:x"), ("homes", "restore", "web:x")):
        done = cli(tmp_path, *command)
        assert done.returncode == 2 and done.stdout == ""
        assert "no conversation matches 'web:x'" in error_line(done), command
    unknown = cli(tmp_path, "homes", "list", "--platform", "slakc")
    assert unknown.returncode == 2 and "no such platform" in error_line(unknown)
    assert not (tmp_path / "root" / "state" / "bridge.db").exists()  # listings never write


def test_a_missing_root_is_still_named(tmp_path: Path) -> None:
    done = cli(tmp_path, "homes", "list", "--json")
    assert done.returncode == 2 and done.stdout == ""
    assert "no gateway state" in error_line(done)
    assert not (tmp_path / "root").exists()


# -- a directory that is not a root ---------------------------------------------------------


def test_init_does_not_take_over_a_directory_holding_other_things(tmp_path: Path) -> None:
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


def test_init_takes_an_empty_directory_a_new_volume_or_its_own_root(tmp_path: Path) -> None:
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
