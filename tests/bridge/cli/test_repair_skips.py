"""``jazz-bridge repair --deep`` names what it left alone and why.

It said "2 skipped" and nothing else: an operator could not tell a symbolic link (never
followed, by design) from a home with no account (which needs ``homes ensure``). Each
skipped entry is now listed with its reason, the first ``MAX_SKIPS`` of them; the rest are
counted.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from provisioning.walk_report import MAX_SKIPS

Cli = Callable[..., subprocess.CompletedProcess[str]]


def _home(tmp_path: Path, cli: Cli) -> Path:
    made = cli(tmp_path, "homes", "ensure", "web:skips")
    assert made.returncode == 0, made.stderr
    return Path(made.stdout.strip().splitlines()[-1])


def test_repair_deep_lists_each_skipped_entry_and_why(tmp_path: Path, cli: Cli) -> None:
    home = _home(tmp_path, cli)
    (home / "to-etc").symlink_to("/etc/passwd")
    os.mkfifo(home / "pipe")
    done = cli(tmp_path, "repair", "--deep")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "3 skipped" in lines[0], done.stdout  # with the home's own personas link
    assert f"  skipped: {home}/to-etc: a symbolic link (never followed)" in lines, done.stdout
    assert f"  skipped: {home}/pipe: a FIFO (never opened)" in lines, done.stdout
    as_json = cli(tmp_path, "repair", "--deep", "--json")
    data = json.loads(as_json.stdout)
    assert sorted(data["skips"]) == [
        f"{home}/personas: a symbolic link (never followed)",
        f"{home}/pipe: a FIFO (never opened)",
        f"{home}/to-etc: a symbolic link (never followed)",
    ]


def test_a_long_list_of_skipped_entries_is_bounded_and_the_rest_counted(
    tmp_path: Path, cli: Cli
) -> None:
    home = _home(tmp_path, cli)
    extra = 7
    for n in range(MAX_SKIPS + extra):
        (home / f"link-{n}").symlink_to("nowhere")
    done = cli(tmp_path, "repair", "--deep")
    assert done.returncode == 0, done.stderr
    named = [line for line in done.stdout.splitlines() if line.startswith("  skipped: ")]
    assert len(named) == MAX_SKIPS, done.stdout
    # the links made and the home's own personas link
    assert f"  ... and {extra + 1} more skipped (the first {MAX_SKIPS} are named)" in (
        done.stdout.splitlines()
    )
