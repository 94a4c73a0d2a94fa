"""``jazz-bridge homes`` run as an operator runs it (the real CLI in a subprocess): what a
script sees on stdout, on stderr and in the exit code. Bad input gets one line that says
what is wrong and how to fix it; a root no gateway has served yet lists nothing; listings
never write."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from cli_support import add_conversation

from provisioning import naming

Cli = Callable[..., subprocess.CompletedProcess[str]]
ErrorLine = Callable[[subprocess.CompletedProcess[str]], str]

SLACK_KEY = "slack:T0TEAM0001:C0CHAN0001:1764669600.000100"
SLACK_LINK = "https://acme.slack.com/archives/C0CHAN0001/p1764669600000100"


def test_homes_path_prints_only_a_home_that_exists(
    tmp_path: Path, cli: Cli, error_line: ErrorLine
) -> None:
    root = tmp_path / "root"
    # no root at all: nothing on stdout (cd "$(...)" fails), the would-be path on stderr
    missing = cli(tmp_path, "homes", "path", "web:demo")
    would_be = root / "chats" / naming.home_name("web:demo")
    assert missing.returncode == 1 and missing.stdout == ""
    assert error_line(missing) == (
        f"jazz-bridge: error: no conversation 'web:demo' at root {root} (its home would be "
        f"{would_be})"
    )
    assert not root.exists()
    # a home made by homes ensure is printed
    assert cli(tmp_path, "homes", "ensure", "web:demo").returncode == 0
    made = cli(tmp_path, "homes", "path", "web:demo")
    assert made.returncode == 0 and made.stdout == f"{would_be}\n", made.stderr
    # a Slack permalink is resolved like homes show does
    add_conversation(root, SLACK_KEY, "slack")
    unmade = cli(tmp_path, "homes", "path", SLACK_LINK)
    assert unmade.returncode == 1 and unmade.stdout == ""
    assert "has no home at" in error_line(unmade)
    assert cli(tmp_path, "homes", "ensure", SLACK_KEY).returncode == 0
    linked = cli(tmp_path, "homes", "path", SLACK_LINK)
    assert linked.returncode == 0, linked.stderr
    assert linked.stdout == f"{root / 'chats' / naming.home_name(SLACK_KEY)}\n"
    unknown = cli(
        tmp_path, "homes", "path", "https://acme.slack.com/archives/C0OTHER/p1000000000000001"
    )
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert "no conversation matches" in error_line(unknown)


def test_archive_wants_a_positive_number_of_idle_days(tmp_path: Path, cli: Cli) -> None:
    root = tmp_path / "root"
    assert cli(tmp_path, "homes", "ensure", "web:fresh").returncode == 0
    add_conversation(root, "web:fresh", "web")
    home = root / "chats" / naming.home_name("web:fresh")
    for days in ("-3", "0", "nan"):
        done = cli(tmp_path, "homes", "archive", "--idle-days", days)
        assert done.returncode == 2, (days, done.stdout, done.stderr)
        assert "argument --idle-days" in done.stderr and "above 0" in done.stderr, done.stderr
        assert home.is_dir()
    assert not list((root / "archive").glob("*.tar.gz"))


def test_list_names_an_unknown_platform(tmp_path: Path, cli: Cli, error_line: ErrorLine) -> None:
    assert cli(tmp_path, "homes", "ensure", "web:x").returncode == 0
    add_conversation(tmp_path / "root", "web:x", "web")
    done = cli(tmp_path, "homes", "list", "--platform", "slakc")
    assert done.returncode == 2
    assert error_line(done) == (
        "jazz-bridge: error: homes list --platform 'slakc': no such platform (one of: slack, "
        "telegram, web)"
    )
    ok = cli(tmp_path, "homes", "list", "--platform", "web", "--json")
    assert ok.returncode == 0 and [r["threadKey"] for r in json.loads(ok.stdout)] == ["web:x"]


# -- a root no gateway has served yet -----------------------------------------------------------


def test_a_root_made_by_init_lists_no_conversations(
    tmp_path: Path, cli: Cli, error_line: ErrorLine
) -> None:
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


def test_a_missing_root_is_still_named(tmp_path: Path, cli: Cli, error_line: ErrorLine) -> None:
    done = cli(tmp_path, "homes", "list", "--json")
    assert done.returncode == 2 and done.stdout == ""
    assert "no gateway state" in error_line(done)
    assert not (tmp_path / "root").exists()
