"""Paths in the configuration that could not mean what the operator wrote.

* ``JAZZ_BRIDGE_LOG__FILE=`` (an unset variable in an env or compose file) became the path
  ``.``: ``config check`` called the configuration valid and printed ``"file": "."``, and
  every command then warned "not logging to .: Is a directory"; serve ran with no log
  file. An empty ``root`` is refused for the same reason; now an empty ``log.file`` is too.
* ``root = "~/jazz"`` (or ``log.file``): nothing expands ``~`` in TOML or a unit's
  ``Environment=``, so ``init`` made a directory literally named ``~`` in the working
  directory (whose removal with ``rm -rf ~`` is a classic disaster) and the gateway served
  from there. It is refused, naming the key and where it was set.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(REPO),
            "JAZZ_BRIDGE_ISOLATION": "off",
            "JAZZ_BRIDGE_LOG__FORMAT": "text",
            **env,
        },
    )


def test_an_empty_log_file_variable_is_refused(tmp_path: Path) -> None:
    done = cli(tmp_path, "config", "check", JAZZ_BRIDGE_LOG__FILE="")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert "log.file" in done.stderr and "[from JAZZ_BRIDGE_LOG__FILE]" in done.stderr
    assert "is empty" in done.stderr


def test_a_tilde_root_in_the_file_is_refused_and_nothing_is_made(tmp_path: Path) -> None:
    config = tmp_path / "jazz-bridge.toml"
    config.write_text('root = "~/jazz-bridge"\n')
    for command in (("config", "check"), ("init",)):
        done = cli(tmp_path, *command, "--config", str(config))
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        line = done.stderr
        assert "root:" in line and "'~'" in line and f"[from {config}]" in line, line
    assert not (tmp_path / "~").exists()


def test_a_tilde_log_file_from_the_environment_is_refused(tmp_path: Path) -> None:
    done = cli(tmp_path, "config", "check", JAZZ_BRIDGE_LOG__FILE="~/jb.log")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "log.file" in done.stderr and "[from JAZZ_BRIDGE_LOG__FILE]" in done.stderr
    assert not (tmp_path / "~").exists()
