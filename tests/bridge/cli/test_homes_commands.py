"""``jazz-bridge homes`` run as an operator runs it (the real CLI in a subprocess): what a
script sees on stdout, on stderr and in the exit code. Bad input gets one line that says
what is wrong and how to fix it; a root no gateway has served yet lists nothing; listings
never write."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

from cli_support import add_conversation

from bridge.model import Inbound, InboxState
from bridge.store import RunOutcome, SqliteStore
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
    assert table.stdout.startswith("Thread key  Platform  ")  # the header, no rows
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


# -- homes show: who stopped a run, an archived home -----------------------------------------

# what the gateway records of a run a person stopped with the Stop button (bridge/engine/run.py)
STOPPED = RunOutcome(
    ok=False,
    exit_code=None,
    envelope_code="interrupted",
    error="interrupted by SIGTERM",
    duration_ms=2300,
    stopped_by="Ada (Stop button)",
)
FAILED = RunOutcome(ok=False, exit_code=1, envelope_code="provider_error", error="401 bad key")


def add_runs(root: Path, key: str, outcomes: list[RunOutcome]) -> None:
    """A conversation with one finished run per outcome, as the gateway records them."""

    async def go() -> None:
        store = SqliteStore(root / "state" / "bridge.db")
        await store.open()
        try:
            for n, outcome in enumerate(outcomes):
                event = Inbound(
                    platform=key.split(":")[0],
                    event_id=f"run{n}",
                    thread_key=key,
                    sender_id="u",
                    sender_name="Ada",
                    text="x",
                )
                msg, _ = await store.accept(event, home=naming.home_name(key), is_command=False)
                run = await store.begin_run(msg.id, "u")
                assert run is not None
                state = InboxState.DONE if outcome.ok else InboxState.FAILED
                await store.finish_run(run.id, outcome, state, [])
        finally:
            await store.close()

    asyncio.run(go())


def test_show_says_who_stopped_a_run(tmp_path: Path, cli: Cli) -> None:
    """A run a person stopped reads "stopped by Ada (Stop button)", not as a failure nor as
    the signal its runner took; a failed run still shows its error."""
    root = tmp_path / "root"
    assert cli(tmp_path, "homes", "ensure", "web:halt").returncode == 0
    add_runs(root, "web:halt", [STOPPED, FAILED])
    shown = cli(tmp_path, "homes", "show", "web:halt")
    assert shown.returncode == 0, shown.stderr
    failed, stopped = (
        ln for ln in shown.stdout.splitlines() if ln.startswith("  #")
    )  # newest first
    assert stopped.startswith("  #1 ") and "stopped by Ada (Stop button)" in stopped, stopped
    assert "2.3 s" in stopped
    assert "SIGTERM" not in shown.stdout and "interrupted" not in shown.stdout, shown.stdout
    assert failed.startswith("  #2 ") and "provider_error" in failed and "401 bad key" in failed
    assert "Failures: 1" in shown.stdout  # the stop is no failure
    data = json.loads(cli(tmp_path, "homes", "show", "web:halt", "--json").stdout)
    by_id = {r["id"]: r for r in data["recentRuns"]}
    assert (by_id[1]["outcome"], by_id[1]["stoppedBy"]) == ("stopped", "Ada (Stop button)")
    assert (by_id[2]["outcome"], by_id[2]["stoppedBy"]) == ("provider_error", None)
    assert data["failures"] == 1
    [listed] = json.loads(cli(tmp_path, "homes", "list", "--json").stdout)
    assert listed["failures"] == 1


def test_show_of_an_archived_home_names_its_archive_and_how_to_restore_it(
    tmp_path: Path, cli: Cli
) -> None:
    """Archived, a home's paths do not exist: ``homes show`` names the archive file (its
    path and size) and the command that brings the home back, which works as printed."""
    root = tmp_path / "root"
    assert cli(tmp_path, "homes", "ensure", "web:packed").returncode == 0
    add_runs(root, "web:packed", [RunOutcome(ok=True, exit_code=0, envelope_code=None)])
    home = root / "chats" / naming.home_name("web:packed")
    before = cli(tmp_path, "homes", "show", "web:packed")
    assert before.returncode == 0, before.stderr
    assert f"Home: {home}\n" in before.stdout and f"{home}/history" in before.stdout
    assert "Archived: no" in before.stdout and "Archive:" not in before.stdout

    archived = cli(tmp_path, "homes", "archive", "web:packed", "--json")
    assert archived.returncode == 0, archived.stderr
    [row] = json.loads(archived.stdout)
    tarball, size = row["tarball"], row["sizeBytes"]
    assert not home.exists() and Path(tarball).is_file()

    shown = cli(tmp_path, "homes", "show", "web:packed")
    assert shown.returncode == 0, shown.stderr
    assert str(home) not in shown.stdout, shown.stdout  # no path that is not there
    assert "Archived: yes" in shown.stdout
    lines = {
        ln.split(":", 1)[0].strip(): ln.split(":", 1)[1].strip()
        for ln in shown.stdout.splitlines()
        if ":" in ln and not ln.startswith("  #")
    }
    assert lines["Archive"] == f"{tarball} ({human(size)})", shown.stdout
    assert lines["Restore with"] == "jazz-bridge homes restore web:packed"
    data = json.loads(cli(tmp_path, "homes", "show", "web:packed", "--json").stdout)
    assert data["archive"] == tarball and data["sizeBytes"] == size
    assert data["transcript"] is None and data["workspace"] is None
    assert data["restore"] == lines["Restore with"]

    # said with --root, the command says it too
    elsewhere = cli(
        tmp_path,
        "homes",
        "show",
        "web:packed",
        "--root",
        str(root),
        JAZZ_BRIDGE_ROOT="/nonexistent",
    )
    assert f"Restore with: jazz-bridge homes restore web:packed --root {root}\n" in elsewhere.stdout
    # the command works as printed
    program, *args = shlex.split(lines["Restore with"])
    assert program == "jazz-bridge"
    restored = cli(tmp_path, *args)
    assert restored.returncode == 0, restored.stderr
    assert home.is_dir() and not Path(tarball).exists()
    again = cli(tmp_path, "homes", "show", "web:packed")
    assert f"{home}/history" in again.stdout and "Archive:" not in again.stdout


def human(size: int) -> str:
    from bridge.operators import human_size

    return human_size(size)
