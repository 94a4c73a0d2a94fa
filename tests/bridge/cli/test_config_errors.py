"""A configuration the gateway cannot use is told so a person can fix it, and always exits
with the one configuration exit code (78, EX_CONFIG), whichever command read it.

* ``[server] prot = 1`` said "unknown key" and left finding ``port`` to the reader: an
  unknown key now says which key of its table it was probably meant to be.
* ``JAZZ_BRIDGE_TELEGRAM__ALLOWED_USERS=111`` said "Input should be a valid list": a list
  in an environment variable must be JSON, and the message now says so with the
  variable's own value written as JSON (``'[111]'``).
* Every error exited 2, a bad key as a port in use: a unit or a script could not tell "fix
  the configuration" from anything else.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from bridge.cli import EXIT_CONFIG

Cli = Callable[..., subprocess.CompletedProcess[str]]


def test_an_unknown_key_says_which_key_it_was_probably_meant_to_be(
    tmp_path: Path, cli: Cli
) -> None:
    config = tmp_path / "jazz-bridge.toml"
    config.write_text('isolaton = "off"\n[server]\nprot = 1\n[telegram]\nalowed_users = [1]\n')
    done = cli(tmp_path, "config", "check")
    assert done.returncode == EXIT_CONFIG, done.stderr
    assert "isolaton: unknown key (did you mean isolation?)" in done.stderr, done.stderr
    assert "server.prot: unknown key (did you mean server.port?)" in done.stderr
    assert "telegram.alowed_users: unknown key (did you mean telegram.allowed_users?)" in (
        done.stderr
    )


def test_a_list_given_as_plain_text_in_the_environment_says_to_write_it_as_json(
    tmp_path: Path, cli: Cli
) -> None:
    number = cli(tmp_path, "config", "check", JAZZ_BRIDGE_TELEGRAM__ALLOWED_USERS="111")
    assert number.returncode == EXIT_CONFIG, number.stderr
    assert "must be JSON, e.g. JAZZ_BRIDGE_TELEGRAM__ALLOWED_USERS='[111]'" in number.stderr
    words = cli(tmp_path, "config", "check", JAZZ_BRIDGE_SLACK__ALLOWED_TEAMS="T1,T2")
    assert words.returncode == EXIT_CONFIG, words.stderr
    assert """must be JSON, e.g. JAZZ_BRIDGE_SLACK__ALLOWED_TEAMS='["T1", "T2"]'""" in (
        words.stderr
    )


def test_every_configuration_error_has_the_one_exit_code(tmp_path: Path, cli: Cli) -> None:
    bad = {
        "an unknown variable": {"JAZZ_BRIDGE_ISOLATON": "on"},
        "a bad value": {"JAZZ_BRIDGE_SERVER__PORT": "seventy"},
        "a list not JSON": {"JAZZ_BRIDGE_TELEGRAM__ALLOWED_USERS": "abc"},
        "a missing file": {"JAZZ_BRIDGE_CONFIG": str(tmp_path / "nope.toml")},
        "a rule serve starts by": {"JAZZ_BRIDGE_WEB__ENABLED": "false"},
    }
    for what, env in bad.items():
        commands = [("config", "check"), ("serve",)]
        if what != "a rule serve starts by":  # doctor reports a broken rule as a FAIL
            commands += [("init",), ("doctor",), ("homes", "list")]
        for command in commands:
            done = cli(tmp_path, *command, timeout=60, **env)
            assert done.returncode == EXIT_CONFIG, (what, command, done.stderr)
            assert "jazz-bridge: error:" in done.stderr, (what, command, done.stderr)
            assert "Traceback" not in done.stderr, (what, command)
    assert not (tmp_path / "root").exists()  # nothing made by a command refused
    usage = cli(tmp_path, "serve", "--no-such-option")
    assert usage.returncode == 2  # a wrong command line is not the configuration's


def test_the_help_documents_the_exit_codes(tmp_path: Path, cli: Cli) -> None:
    done = cli(tmp_path, "--help")
    assert done.returncode == 0
    assert f"{EXIT_CONFIG}  the configuration is invalid" in done.stdout, done.stdout
