"""Review: the real ``jazz-bridge serve`` process stopped by a signal, or past its grace.

However the gateway is told to stop, it stops the way SIGTERM does: the runs in flight are
ended (no process of theirs outlives the gateway) and their threads are told, once.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))

from faults_support import (
    gateway_env,
    install_runner,
    leftovers,
    notes,
    run_pids,
    serve,
    wait_until,
)

EXIT_WAIT_S = 20  # far more than a stop takes (the shutdown grace plus a few seconds)


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _stop(proc: subprocess.Popen[bytes], sig: signal.Signals) -> float:
    """Send ``sig``; how long the gateway took to exit (bounded)."""
    t0 = time.monotonic()
    proc.send_signal(sig)
    proc.wait(timeout=EXIT_WAIT_S)
    return time.monotonic() - t0


async def test_a_hangup_stops_the_gateway_like_sigterm(env: dict[str, str], tmp_path: Path) -> None:
    """SIGHUP (the terminal of a foreground ``serve`` closed, an operator's ``kill -HUP``
    expecting a reload) killed the gateway on the spot: its run went on without it and the
    thread heard nothing until some later start."""
    async with serve(env, tmp_path) as (proc, client):
        await client.post("h", "hold H1")
        await wait_until(lambda: len(client.starts("web:h")) == 1, what="H1 started")
        runner_pid = client.starts("web:h")[0]["pid"]
        _stop(proc, signal.SIGHUP)
        print(f"\nexit status after SIGHUP: {proc.returncode}")
        assert proc.returncode == 0, f"killed by the hangup (exit status {proc.returncode})"
        await wait_until(lambda: not _alive(runner_pid), 5, "the run to be ended")
    async with serve(env, tmp_path) as (proc, client):
        msgs = await client.messages("h")
        assert len([m for m in msgs if "shutting down" in str(m["text"])]) == 1, msgs
        assert len(client.starts("web:h")) == 1


async def test_runs_cut_off_by_the_shutdown_grace_do_not_outlive_the_gateway(
    env: dict[str, str], tmp_path: Path, fake_dir: Path
) -> None:
    """A run that ignores SIGTERM, with a shutdown grace shorter than runner.kill_grace_s:
    the gateway gave up waiting and exited, and the run (and its child) kept running as the
    conversation's account with nobody left to stop it."""
    install_runner(env, fake_dir, "fault_runner.py")
    env["JAZZ_BRIDGE_SERVER__SHUTDOWN_GRACE_S"] = "1"
    env["JAZZ_BRIDGE_RUNNER__KILL_GRACE_S"] = "10"
    async with serve(env, tmp_path) as (proc, client):
        await client.post("n", "noterm")
        await wait_until(
            lambda: any(n.get("event") == "children" for n in notes(fake_dir)),
            what="the run and its child",
        )
        took = _stop(proc, signal.SIGTERM)
        assert proc.returncode == 0
        uids, pids, sessions = run_pids(fake_dir)
        left = leftovers(uids=uids, pids=pids, sessions=sessions)
        print(f"\nexited after {took:.1f}s; left running: {[str(p) for p in left]}")
        assert not left, "left running after the gateway exited: " + "; ".join(map(str, left))
    async with serve(env, tmp_path) as (proc, client):
        msgs = await client.messages("n")
        told = [m for m in msgs if m["role"] != "user"]
        assert len(told) == 1 and "interrupted" in str(told[0]["text"]), msgs
