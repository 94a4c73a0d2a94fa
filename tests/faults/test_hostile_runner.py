"""Isolation against a hostile runner (root: real throwaway accounts per conversation).

The real ``jazz-bridge serve`` process runs with Slack and Telegram secrets in its
environment and a config file holding another. Conversation B's runner writes a secret
into its home; conversation A's runner (``hostile_runner.py``) tries to read B's home, the
gateway's state, config and environment, and plants links, a FIFO, hard links, a link
named like the repair marker and a ``workspace`` that links to a directory it cannot reach
(behind a 0700 one) in its own home. It reports what it could do; the test
asserts on those facts, then runs ``jazz-bridge repair --deep``, and then a restart of the
gateway (its start-up repair, then the home repair when it first provisions A, before A's
next run) over the plants: nothing is followed, nothing hangs, no other file's mode changes,
and A's next run starts in its own home, not where its ``workspace`` link points.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from accounts_support import needs_root, remove_accounts
from faults_support import gateway_env, install_runner, serve

from provisioning import naming
from provisioning.layout import Layout

pytestmark = [pytest.mark.faults, needs_root]

MARKER = ".permissions-repaired"
DENIED = {"error:EACCES", "error:EPERM"}


@dataclass(frozen=True)
class Snapshot:
    mode: int
    uid: int
    gid: int
    data: bytes

    @classmethod
    def of(cls, path: Path) -> Snapshot:
        st = path.stat()
        return cls(st.st_mode, st.st_uid, st.st_gid, path.read_bytes())


@pytest.fixture
def world(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, Any]]:
    root = tmp_path / "root"
    secret = {
        "slack_bot": f"xoxb-{secrets.token_hex(12)}",
        "slack_signing": secrets.token_hex(16),
        "telegram_bot": f"123456:{secrets.token_urlsafe(24)}",
        "telegram_webhook": secrets.token_urlsafe(24),
        "plain_slack": f"xoxb-{secrets.token_hex(12)}",
        "plain_telegram": f"654321:{secrets.token_urlsafe(24)}",
        "config": f"xapp-{secrets.token_hex(12)}",
        "b": f"B-SECRET-{secrets.token_hex(8)}",
    }
    env = gateway_env(
        root,
        fake_dir,
        uid_range,
        JAZZ_BRIDGE_SLACK__ENABLED="false",
        JAZZ_BRIDGE_SLACK__BOT_TOKEN=secret["slack_bot"],
        JAZZ_BRIDGE_SLACK__SIGNING_SECRET=secret["slack_signing"],
        JAZZ_BRIDGE_TELEGRAM__ENABLED="false",
        JAZZ_BRIDGE_TELEGRAM__TOKEN=secret["telegram_bot"],
        JAZZ_BRIDGE_TELEGRAM__WEBHOOK_SECRET=secret["telegram_webhook"],
        SLACK_BOT_TOKEN=secret["plain_slack"],
        TELEGRAM_BOT_TOKEN=secret["plain_telegram"],
    )
    install_runner(env, fake_dir, "hostile_runner.py")
    config = tmp_path / "jazz-bridge.toml"
    config.write_text(f'[slack]\napp_token = "{secret["config"]}"\n')
    os.chmod(config, 0o640)
    env["JAZZ_BRIDGE_CONFIG"] = str(config)
    root_file = fake_dir / "root-owned.txt"  # root's, world-readable: the hard-link target
    root_file.write_text("ROOT FILE\n")
    os.chmod(root_file, 0o644)
    locked = tmp_path / "locked"  # root's, 0700: A cannot reach what is inside by path
    (locked / "inner").mkdir(parents=True)
    os.chmod(locked, 0o700)
    os.chmod(locked / "inner", 0o755)
    (locked / "inner" / "locked-secret").write_text("LOCKED\n")
    os.chmod(locked / "inner" / "locked-secret", 0o644)
    decoy = fake_dir / "decoy.txt"  # where the marker link points
    decoy.write_text("DECOY\n")
    os.chmod(decoy, 0o600)
    layout = Layout(root)
    yield {
        "tmp": tmp_path,
        "fake": fake_dir,
        "env": env,
        "secret": secret,
        "layout": layout,
        "config": config,
        "root_file": root_file,
        "decoy": decoy,
        "locked_inner": locked / "inner",
        "a_home": layout.home(naming.home_name("web:a")),
        "b_home": layout.home(naming.home_name("web:b")),
    }
    remove_accounts(layout.uid_map)


def report(fake_dir: Path) -> dict[str, Any]:
    found = sorted(fake_dir.glob("report-*.json"))
    assert len(found) == 1, found
    data: dict[str, Any] = json.loads(found[0].read_text())
    return data


def check_plants_harmless(w: dict[str, Any], before: dict[str, Snapshot], a_uid: int) -> None:
    """After a repair: every other file as it was, plants left alone, A's own files fixed."""
    for name, snap in before.items():
        assert Snapshot.of(w[name] if name in w else Path(name)) == snap, f"{name} changed"
    a_home: Path = w["a_home"]
    st = a_home.lstat()
    assert stat.S_IMODE(st.st_mode) == 0o2750, oct(st.st_mode)  # opened to all; closed again
    assert st.st_uid == a_uid
    assert (a_home / "to-b-home").is_symlink()
    assert (a_home / "to-b-secret").is_symlink()
    assert stat.S_ISFIFO((a_home / "pipe").lstat().st_mode)
    marker = (a_home / MARKER).lstat()
    assert stat.S_ISREG(marker.st_mode), "the marker link was not replaced by a marker"
    assert marker.st_uid == a_uid
    mine = (a_home / "mine-open.txt").lstat()
    # the home-repair rule in a setgid home: only the "other" bits go
    assert stat.S_IMODE(mine.st_mode) == 0o660, "the walk did not run over A's home"


async def test_a_hostile_conversation_reads_nothing_and_its_plants_stay_harmless(
    world: dict[str, Any],
) -> None:
    w, env, secret, layout = world, world["env"], world["secret"], world["layout"]
    b_secret: Path = w["b_home"] / "secret.txt"
    async with serve(env, w["tmp"]) as (proc, client):
        await client.post("b", f"victim {secret['b']}")
        await client.wait_role("b", "assistant")
        assert b_secret.read_text().strip() == secret["b"]  # the target exists (as root)
        gateway_environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        assert secret["slack_bot"].encode() in gateway_environ  # the target holds them
        targets = {
            "root": str(layout.root),
            "chats": str(layout.chats),
            "state": str(layout.state),
            "state_db": str(layout.database),
            "accounts_json": str(layout.uid_map),
            "config_file": str(w["config"]),
            "b_home": str(w["b_home"]),
            "b_secret": str(b_secret),
            "root_file": str(w["root_file"]),
            "decoy": str(w["decoy"]),
            "locked_inner": str(w["locked_inner"]),
        }
        (w["fake"] / "targets.json").write_text(json.dumps(targets))
        await client.post("a", "attack")
        await client.wait_role("a", "assistant")
        facts = report(w["fake"])

    print("\nreads:", facts["reads"], "\nwrites:", facts["writes"], "\nplants:", facts["plants"])
    a_uid = int(facts["uid"])
    b_uid = w["b_home"].stat().st_uid
    assert a_uid not in (0, b_uid) and facts["home"] == str(w["a_home"])
    assert facts["gateway_pid"] == proc.pid, "the runner's parent is not the gateway"
    assert facts["groups"] in ([], [facts["gid"]]), "the run kept supplementary groups"
    # every read and write failed for lack of permission (not because a path was wrong)
    for kind in ("reads", "writes"):
        for what, result in facts[kind].items():
            assert result in DENIED, f"{kind} {what}: {result[:200]}"
    assert facts["signals"]["gateway_kill0"] == "error:EPERM"
    assert facts["foreign_environs"] == {}
    # nothing secret in the runner's own environment
    run_env: dict[str, str] = facts["env"]
    assert run_env["JAZZ_HOME"] == str(w["a_home"])  # it is the run's real environment
    dumped = json.dumps(run_env)
    for name, value in secret.items():
        if name != "b":
            assert value not in dumped, f"the {name} secret reached the runner"
    for key in run_env:
        assert not key.startswith(("JAZZ_BRIDGE_", "SLACK", "TELEGRAM")), key
    logged = (w["tmp"] / "serve.log").read_text()
    assert "listening on" in logged  # it is the gateway's log
    for name, value in secret.items():
        assert value not in logged, f"the {name} secret is in the gateway's log"
    # the plants it could make
    plants = facts["plants"]
    plant_names = ("link_b_home", "link_b_secret", "fifo", "marker_link", "workspace_link")
    for what in (*plant_names, "home_chmod"):
        assert plants[what] == "ok", (what, plants[what])
    assert plants["open_file"] == "ok:created" and plants["open_file_chmod"] == "ok"
    # protected_hardlinks refuses a link to a file it does not own; plant those as root,
    # as a kernel without that protection would let it
    assert plants["hard_root_file"] in ("ok", "error:EPERM")
    a_home: Path = w["a_home"]
    os.link(w["root_file"], a_home / "hard-root-by-root")
    os.link(b_secret, a_home / "hard-b-secret")
    before = {
        "root_file": Snapshot.of(w["root_file"]),
        "decoy": Snapshot.of(w["decoy"]),
        "config": Snapshot.of(w["config"]),
        str(b_secret): Snapshot.of(b_secret),
    }
    b_home_mode = w["b_home"].stat().st_mode

    # 1. jazz-bridge repair --deep (bounded: a FIFO opened for reading would block it)
    done = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "repair", "--deep"],
        env=env,
        cwd=w["tmp"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    print("repair --deep:", done.returncode, done.stdout.strip(), done.stderr.strip()[-500:])
    assert done.returncode == 0, done.stdout + done.stderr
    check_plants_harmless(w, before, a_uid)
    assert w["b_home"].stat().st_mode == b_home_mode

    # 2. the same plants again, then a restart: the start-up repair closes the home at once,
    # the home repair (the walk) runs when the gateway first provisions A, before its run
    (a_home / MARKER).unlink()
    os.symlink(w["decoy"], a_home / MARKER)
    os.lchown(a_home / MARKER, a_uid, a_uid)
    os.chmod(a_home / "mine-open.txt", 0o666)
    os.chmod(a_home, 0o777)
    async with serve(env, w["tmp"]) as (_, client):
        st = a_home.lstat()
        assert stat.S_IMODE(st.st_mode) == 0o2750 and st.st_uid == a_uid, oct(st.st_mode)
        await client.post("a", "probe")
        seen = (await client.wait_role("a", "assistant", count=2))[-1]["text"]
        assert seen.startswith("probe: "), seen
        # as A's run found its home: its own file closed, the marker link replaced
        found = json.loads(seen.removeprefix("probe: ").splitlines()[0])  # footer lines after
        assert (found["mine_open"], found["marker"]) == (0o660, "file"), seen
        # its workspace links into a directory only root could enter: the run started in
        # its own home instead (the link is its own business, left as it is)
        assert (a_home / "workspace").is_symlink()
        assert found["cwd"] == str(a_home), seen
        assert found["locked_read"] == "error:ENOENT", seen
        check_plants_harmless(w, before, a_uid)
        await client.post("a", "hello again")
        await client.post("b", "hello again")
        for thread, count in (("a", 3), ("b", 2)):
            answers = await client.wait_role(thread, "assistant", count=count)
            assert answers[-1]["text"].startswith("ok: hello again")
