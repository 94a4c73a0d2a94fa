"""Settings serve cannot work with are refused before anything is made, naming the key:
an empty token (an unset variable in an env file), an empty root, a host that does not
resolve; and doctor reports a damaged uid map instead of crashing.

CLI tests run the real command line in a subprocess (the ``cli`` fixture); the web test runs
the real gateway in process (as tests/adapters/web/test_web_api.py does).
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway

from bridge.cli import EXIT_CONFIG
from bridge.errors import BridgeError

Cli = Callable[..., subprocess.CompletedProcess[str]]
ErrorLine = Callable[[subprocess.CompletedProcess[str]], str]


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


# -- an empty web.token ------------------------------------------------------------------------


async def test_an_empty_web_token_is_refused_not_read_as_none(env: dict[str, str]) -> None:
    """``JAZZ_BRIDGE_WEB__TOKEN=`` with the server bound beyond loopback: read as "no token"
    it let serve start on 0.0.0.0 trusting every request whose Host header (the client's to
    write) said loopback, so anyone on the network could post and start runs."""
    env = {**env, "JAZZ_BRIDGE_WEB__TOKEN": "", "JAZZ_BRIDGE_SERVER__HOST": "0.0.0.0"}
    with pytest.raises(BridgeError, match=r"web\.token: .*is empty"):
        async with running_gateway(env):
            pass


# -- an empty ops.token ------------------------------------------------------------------------


def test_config_check_refuses_the_empty_ops_token_serve_refuses(
    tmp_path: Path, cli: Cli, error_line: ErrorLine
) -> None:
    """``config check`` and ``doctor`` promise "what serve would refuse to start with: the
    same line, exit 78"; an empty ops.token passes both, and serve then refuses it (after
    making a whole new root)."""
    checked = cli(tmp_path, "config", "check", JAZZ_BRIDGE_OPS__TOKEN="")
    assert checked.returncode == EXIT_CONFIG, checked.stderr[-2000:]
    assert "ops.token" in error_line(checked)


# -- an unresolvable server.host ---------------------------------------------------------------


def test_an_unresolvable_server_host_is_named(
    tmp_path: Path, cli: Cli, error_line: ErrorLine
) -> None:
    done = cli(
        tmp_path,
        "serve",
        JAZZ_BRIDGE_SERVER__HOST="no-such-host.invalid",
        JAZZ_BRIDGE_SERVER__PORT="0",
        JAZZ_BRIDGE_WEB__TOKEN="a-long-web-token-for-the-review",
    )
    assert done.returncode == 2
    line = error_line(done)
    assert "server.host" in line, line
    # like a taken port: no root is made for a gateway that cannot listen
    assert not (tmp_path / "root").exists()


# -- an empty root -----------------------------------------------------------------------------


def test_an_empty_root_does_not_take_over_the_working_directory(tmp_path: Path, cli: Cli) -> None:
    """``JAZZ_BRIDGE_ROOT=`` (an unset variable) is read as ``Path("")`` == ``.``: init makes
    chats/ state/ ... in the working directory and chmods it 2751, and repair then strips
    the "other" bits from every file already there."""
    work = tmp_path / "work"
    work.mkdir()
    os.chmod(work, 0o755)
    mine = work / "notes.txt"
    mine.write_text("mine")
    os.chmod(mine, 0o644)
    for command in (("init",), ("repair",)):
        done = cli(work, *command, JAZZ_BRIDGE_ROOT="")
        assert done.returncode == 2 or not (work / "state").exists(), (command, done.stderr)
    assert stat.S_IMODE(work.stat().st_mode) == 0o755
    assert stat.S_IMODE(mine.stat().st_mode) == 0o644
    assert not (work / "chats").exists()


# -- a damaged uid map -------------------------------------------------------------------------


@pytest.mark.parametrize("content", ["[]", '{"accounts": {"HOME": 5}}'])
def test_doctor_reports_a_damaged_uid_map_instead_of_crashing(
    tmp_path: Path, content: str, cli: Cli
) -> None:
    """``state/accounts.json`` that is JSON but not the uid map's shape (a list; an entry
    that is not a table): doctor, the command one runs when something is broken, dies with
    a TypeError/AttributeError traceback (exit 1) instead of a FAIL line with its fix."""
    from provisioning import naming

    root = tmp_path / "root"
    home = naming.home_name("web:demo")
    (root / "state").mkdir(parents=True)
    (root / "chats" / home).mkdir(parents=True)
    (root / "state" / "accounts.json").write_text(content.replace("HOME", home))
    done = cli(tmp_path, "doctor", JAZZ_BRIDGE_ISOLATION="on")
    assert "Traceback" not in done.stderr, done.stderr[-1500:]
    assert done.returncode == 1
    assert any(line.startswith("FAIL") for line in done.stdout.splitlines()), done.stdout
