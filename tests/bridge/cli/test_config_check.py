"""``jazz-bridge config check``: paths that could not mean what the operator wrote are
refused naming the key and where it was set, and the printed configuration masks every
configured secret wherever it sits.

* ``JAZZ_BRIDGE_LOG__FILE=`` (an unset variable in an env or compose file) became the path
  ``.``: ``config check`` called the configuration valid and printed ``"file": "."``, and
  every command then warned "not logging to .: Is a directory"; serve ran with no log
  file. An empty ``root`` is refused for the same reason; now an empty ``log.file`` is too.
* ``root = "~/jazz"`` (or ``log.file``): nothing expands ``~`` in TOML or a unit's
  ``Environment=``, so ``init`` made a directory literally named ``~`` in the working
  directory (whose removal with ``rm -rf ~`` is a classic disaster) and the gateway served
  from there. It is refused, naming the key and where it was set.
* The classic Telegram set-up puts the bot token in the webhook's path
  (``https://host/telegram/webhook/<token>``, a proxy maps it): ``telegram.token`` was
  masked, but ``telegram.webhook_url`` printed the same token in full, to a terminal, a
  pasted support ticket or a CI log. The log lines and doctor already mask every configured
  secret wherever it appears; ``config check``'s output now does too.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from gateway_harness import run_cli

from bridge.cli import EXIT_CONFIG

Cli = Callable[..., subprocess.CompletedProcess[str]]
ErrorLine = Callable[[subprocess.CompletedProcess[str]], str]

REPO = Path(__file__).resolve().parents[3]
TOKEN = "123456:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"


def without_root(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The CLI with no root in its environment (the ``cli`` fixture's would override the
    configuration file's)."""
    base = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "JAZZ_BRIDGE_ISOLATION": "off",
        "JAZZ_BRIDGE_LOG__FORMAT": "text",
    }
    return run_cli({**base, **env}, *args, cwd=cwd, inherit=False)


def test_an_empty_log_file_variable_is_refused(tmp_path: Path) -> None:
    done = without_root(tmp_path, "config", "check", JAZZ_BRIDGE_LOG__FILE="")
    assert done.returncode == EXIT_CONFIG, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert "log.file" in done.stderr and "[from JAZZ_BRIDGE_LOG__FILE]" in done.stderr
    assert "is empty" in done.stderr


def test_a_tilde_root_in_the_file_is_refused_and_nothing_is_made(tmp_path: Path) -> None:
    config = tmp_path / "jazz-bridge.toml"
    config.write_text('root = "~/jazz-bridge"\n')
    for command in (("config", "check"), ("init",)):
        done = without_root(tmp_path, *command, "--config", str(config))
        assert done.returncode == EXIT_CONFIG, (command, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        line = done.stderr
        assert "root:" in line and "'~'" in line and f"[from {config}]" in line, line
    assert not (tmp_path / "~").exists()


def test_a_tilde_log_file_from_the_environment_is_refused(tmp_path: Path) -> None:
    done = without_root(tmp_path, "config", "check", JAZZ_BRIDGE_LOG__FILE="~/jb.log")
    assert done.returncode == EXIT_CONFIG, (done.stdout, done.stderr)
    assert "log.file" in done.stderr and "[from JAZZ_BRIDGE_LOG__FILE]" in done.stderr
    assert not (tmp_path / "~").exists()


def test_config_names_a_directory_given_as_the_file(
    tmp_path: Path, cli: Cli, error_line: ErrorLine
) -> None:
    done = cli(tmp_path, "config", "check", "--config", str(tmp_path))
    assert done.returncode == EXIT_CONFIG
    assert error_line(done).startswith(
        f"jazz-bridge: error: --config names {tmp_path}, which is a directory: name the TOML "
        "file itself"
    )
    env = cli(tmp_path, "config", "check", JAZZ_BRIDGE_CONFIG=str(tmp_path))
    assert "JAZZ_BRIDGE_CONFIG names" in error_line(env) and "is a directory" in env.stderr


def test_a_token_inside_another_setting_is_masked(tmp_path: Path, cli: Cli) -> None:
    config = tmp_path / "jazz-bridge.toml"
    config.write_text(
        "[telegram]\n"
        f'token = "{TOKEN}"\n'
        "allowed_users = [111111111]\n"
        f'webhook_url = "https://bridge.example.com/telegram/webhook/{TOKEN}"\n'
        'webhook_secret = "0123456789abcdef0123456789abcdef"\n'
    )
    done = cli(tmp_path, "config", "check", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert TOKEN not in done.stdout + done.stderr
    shown = json.loads(done.stdout)["telegram"]
    assert shown["webhook_url"].startswith("https://bridge.example.com/telegram/webhook/")
    assert shown["allowed_users"] == [111111111]  # the rest as it is
