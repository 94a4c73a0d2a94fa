"""What an operator types, run as they would: the real CLI in a subprocess. Bad input gets one
line that says what is wrong, where, and how to fix it; nothing is made at a wrong root."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

from bridge.model import Inbound
from bridge.store import SqliteStore
from provisioning import naming

REPO = Path(__file__).resolve().parents[2]
SLACK_KEY = "slack:T0TEAM0001:C0CHAN0001:1764669600.000100"
SLACK_LINK = "https://acme.slack.com/archives/C0CHAN0001/p1764669600000100"


def cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={
            "PATH": "/usr/bin:/bin",
            "JAZZ_BRIDGE_ISOLATION": "off",
            "JAZZ_BRIDGE_ROOT": str(tmp_path / "root"),
            **env,
        },
    )


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    return done.stderr.strip().splitlines()[-1]


def add_conversation(root: Path, key: str, platform: str) -> None:
    """A conversation in the root's store, as the gateway records one (no run yet)."""

    async def go() -> None:
        store = SqliteStore(root / "state" / "bridge.db")
        await store.open()
        try:
            await store.accept(
                Inbound(platform=platform, event_id="e1", thread_key=key, sender_id="u", text="x"),
                home=naming.home_name(key),
                is_command=False,
            )
        finally:
            await store.close()

    asyncio.run(go())


def test_homes_path_prints_only_a_home_that_exists(tmp_path: Path) -> None:
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


def test_archive_wants_a_positive_number_of_idle_days(tmp_path: Path) -> None:
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


def test_list_names_an_unknown_platform(tmp_path: Path) -> None:
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


def test_a_taken_port_is_named_before_a_new_root_is_made(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = cli(tmp_path, "serve", JAZZ_BRIDGE_SERVER__PORT=port)
        assert done.returncode == 2
        line = error_line(done)
        assert line.startswith(f"jazz-bridge: error: port {port} on 127.0.0.1 is already in use")
        assert "server.port (JAZZ_BRIDGE_SERVER__PORT)" in line
        assert not (tmp_path / "root").exists()
        # an existing root: the server's own bind error says the same
        assert cli(tmp_path, "init").returncode == 0
        again = cli(tmp_path, "serve", JAZZ_BRIDGE_SERVER__PORT=port)
        assert again.returncode == 2
        assert "is already in use" in error_line(again), again.stderr[-2000:]


def test_a_root_under_a_file_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = cli(tmp_path, "init", "--root", str(blocker / "sub"))
    assert done.returncode == 2
    assert error_line(done) == (
        f"jazz-bridge: error: {blocker / 'sub'}: {blocker} is a file, not a directory, so "
        "nothing can be made under it: pick another path (--root, root, JAZZ_BRIDGE_ROOT)"
    )


def test_config_names_a_directory_given_as_the_file(tmp_path: Path) -> None:
    done = cli(tmp_path, "config", "check", "--config", str(tmp_path))
    assert done.returncode == 2
    assert error_line(done).startswith(
        f"jazz-bridge: error: --config names {tmp_path}, which is a directory: name the TOML "
        "file itself"
    )
    env = cli(tmp_path, "config", "check", JAZZ_BRIDGE_CONFIG=str(tmp_path))
    assert "JAZZ_BRIDGE_CONFIG names" in error_line(env) and "is a directory" in env.stderr


# Ctrl-C while the command line's imports load (pydantic first): the console script's target
# must catch it, not leave it to the interpreter's traceback.
INTERRUPT_WHILE_IMPORTING = """
import importlib, sys, tomllib
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "pydantic":
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, Interrupt())
target = tomllib.load(open(sys.argv[1], "rb"))["project"]["scripts"]["jazz-bridge"]
module, _, func = target.partition(":")
sys.argv[1:] = ["config", "check"]
sys.exit(getattr(importlib.import_module(module), func)())
"""


def test_ctrl_c_while_loading_exits_quietly(tmp_path: Path) -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["jazz-bridge"].endswith(":main")
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPT_WHILE_IMPORTING, str(REPO / "pyproject.toml")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr == "" and done.stdout == ""
