"""A command run with other root settings than the gateway served the root with (an
operator's shell without the unit's ``Environment=`` lines) says which and both values; one
that changes accounts or homes refuses unless told ``--ignore-served-settings``.

The real ``serve`` records its settings in ``<root>/state/served-settings.json``; the real
CLI compares, naming where its own value came from.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from bridge.cli import EXIT_CONFIG

Cli = Callable[..., subprocess.CompletedProcess[str]]
Serving = Callable[..., AbstractContextManager[subprocess.Popen[str]]]

GATEWAY = {"JAZZ_BRIDGE_ACCOUNTS__UID_MIN": "70000"}
OTHER = {"JAZZ_BRIDGE_ACCOUNTS__UID_MIN": "75000"}


def test_a_listing_with_other_settings_than_the_running_gateway_says_which(
    tmp_path: Path, cli: Cli, serving: Serving
) -> None:
    with serving(tmp_path, **GATEWAY) as proc:
        same = cli(tmp_path, "homes", "list", **GATEWAY)
        other = cli(tmp_path, "homes", "list", **OTHER)

    assert same.returncode == 0 and "differ" not in same.stderr, same.stderr
    assert other.returncode == 0, other.stderr
    assert "this command's settings differ from those of the gateway serving this root" in (
        other.stderr
    )
    assert (
        f"accounts.uid_min: 70000 for the gateway serving this root (pid {proc.pid}), 75000 "
        "here (from JAZZ_BRIDGE_ACCOUNTS__UID_MIN)"
    ) in other.stderr


def test_a_command_that_changes_homes_is_refused_with_other_settings(
    tmp_path: Path, cli: Cli, serving: Serving
) -> None:
    with serving(tmp_path, **GATEWAY):
        pass
    root = tmp_path / "root"

    refused = cli(tmp_path, "homes", "ensure", "web:x", **OTHER)

    assert refused.returncode == EXIT_CONFIG, refused.stderr
    assert f"recorded in {root / 'state' / 'served-settings.json'}" in refused.stderr
    assert "accounts.uid_min: 70000 for the last gateway on this root (served " in (refused.stderr)
    assert "--ignore-served-settings to go on with these" in refused.stderr
    assert not (root / "chats").exists() or not any((root / "chats").iterdir())

    forced = cli(tmp_path, "homes", "ensure", "web:x", "--ignore-served-settings", **OTHER)
    assert forced.returncode == 0, forced.stderr
    assert "accounts.uid_min: 70000" in forced.stderr  # still said
    assert Path(forced.stdout.strip()).is_dir()
    with_theirs = cli(tmp_path, "repair", **GATEWAY)
    assert with_theirs.returncode == 0 and "differ" not in with_theirs.stderr
