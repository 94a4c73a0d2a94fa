"""Sweeping a run's leftovers: tagged processes that left the group are found and killed.

Real processes: ``setsid sleep`` started with a run tag, as a run's grandchild would be.
"""

from __future__ import annotations

import asyncio
import os
import select
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bridge.runner import killer, procs
from bridge.runner.procs import RUN_TAG_ENV, Sweeps, kill_all, run_processes


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _all_gone(pids: list[int], timeout: float = 5.0) -> bool:
    """Every pid dead or a zombie, waited for (bounded): a process SIGKILLed a moment ago
    may still be exiting. Its memory (its environment, so its run tag) goes first, so the
    sweep no longer finds it, while /proc still shows it running for a few milliseconds."""
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)  # polling the kernel's teardown, bounded
    return True


@pytest.fixture
def spawn() -> Iterator[Any]:
    started: list[subprocess.Popen[bytes]] = []

    def start(tag: str | None) -> int:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        if tag:
            env[RUN_TAG_ENV] = tag
        proc = subprocess.Popen(["setsid", "sleep", "300"], env=env)
        started.append(proc)
        return proc.pid

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def test_a_tagged_process_that_left_the_group_is_found_and_killed(spawn: Any) -> None:
    mine, other = spawn("a" * 24), spawn("b" * 24)
    stranger = spawn(None)
    assert run_processes("a" * 24, None) == [mine]
    assert kill_all("a" * 24, None, None) == []
    assert _all_gone([mine])
    assert _alive(other) and _alive(stranger)


async def test_sweeps_waiting_together_share_one_scan(spawn: Any) -> None:
    sweeps = Sweeps(min_interval_s=0.2)
    first = spawn("c" * 24)
    assert await sweeps.sweep("c" * 24, None, None) == []  # idle: at once, on its own
    assert sweeps.scans == 1
    pids = [spawn(f"{i}" * 24) for i in range(3)]
    stranger = spawn(None)
    left = await asyncio.gather(*(sweeps.sweep(f"{i}" * 24, None, None) for i in range(3)))
    await sweeps.close()
    assert left == [[], [], []]
    assert sweeps.scans == 2  # the three that waited together: one sweep
    assert _all_gone([first, *pids])
    assert _alive(stranger)


def test_an_account_kill_refuses_root() -> None:
    with pytest.raises(ValueError, match="would kill every process"):
        killer.kill_account(0)


SYSTEM_PYTHON = "/usr/bin/python3"  # one nobody can run (the venv's may sit under /root)


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists(SYSTEM_PYTHON),
    reason="needs root (to start a process as nobody) and /usr/bin/python3",
)
@pytest.mark.parametrize("how", ["one", "many"])
def test_an_account_kill_ends_a_fork_chain_that_scans_cannot_see(how: str) -> None:
    """The chain holds a pipe's write end in every generation: end-of-file on the read end
    says the last one is gone (a /proc scan cannot tell)."""
    nobody = 65534
    if procs.run_processes(None, nobody):
        pytest.skip("something already runs as nobody on this host")
    chain = (
        "import os\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    while True:\n"
        "        if os.fork() != 0:\n"
        "            os._exit(0)\n"
    )
    switch = ["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups"]
    read, write = os.pipe()
    subprocess.run(
        [*switch, SYSTEM_PYTHON, "-I", "-S", "-c", chain],
        pass_fds=(write,),
        check=True,
    )
    os.close(write)
    try:
        if how == "one":
            killer.kill_account(nobody)
        else:  # the start-up form: every account in one request (here nobody and a free uid)
            killer.kill_accounts({nobody, 71999})
        ready, _, _ = select.select([read], [], [], 10)
        assert ready and os.read(read, 1) == b"", "the fork chain outlived the account kill"
    finally:
        os.close(read)


@pytest.mark.skipif(os.geteuid() != 0, reason="the helper switches uids: needs root")
def test_the_helper_is_kept_and_started_again_when_it_died() -> None:
    killer.kill_accounts({71998})
    first = killer.helper_pid()
    assert first is not None
    killer.kill_accounts({71997})
    assert killer.helper_pid() == first  # one helper, not a process per sweep
    os.kill(first, 9)
    os.waitid(os.P_PID, first, os.WEXITED | os.WNOWAIT)  # dead (its parent reaps it)
    killer.kill_accounts({71996})  # told on the closed pipe, and started again
    second = killer.helper_pid()
    assert second is not None and second != first


@pytest.mark.parametrize("uid", [0, -1, 2**31 - 1, 2**32 - 1])
def test_no_uid_that_could_be_root_is_ever_sent_to_the_helper(uid: int) -> None:
    """(uid_t)-1 means "unchanged" to setresuid: a helper switching to it would stay root
    and kill every process on the host."""
    with pytest.raises(ValueError, match="not an account's uid"):
        killer.kill_accounts({71990, uid})


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists(SYSTEM_PYTHON),
    reason="needs root (to start a process as nobody) and /usr/bin/python3",
)
@pytest.mark.parametrize("sig", ["SIGSTOP", "SIGKILL"])
def test_an_account_that_signals_everything_it_can_is_still_killed(sig: str) -> None:
    """The account's process sends SIGSTOP (or SIGKILL) to every process it may signal, in
    a loop: neither the helper nor its child is one of them (the child acts with the
    account's uid as its effective uid only), so the kill cannot be held off."""
    nobody = 65534
    if procs.run_processes(None, nobody):
        pytest.skip("something already runs as nobody on this host")
    switch = ["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups"]
    stopper = f"import os, signal\nwhile True:\n    os.kill(-1, signal.{sig})\n"
    attacker = subprocess.Popen([*switch, SYSTEM_PYTHON, "-I", "-S", "-c", stopper])
    try:
        deadline = time.monotonic() + 10
        while procs.run_processes(None, nobody) != [attacker.pid]:  # setpriv switched
            assert time.monotonic() < deadline, "the attacker never ran as nobody"
            time.sleep(0.01)  # poll interval (bounded above)
        killer.kill_account(nobody)
        assert attacker.wait(timeout=10) == -9
        helper = killer.helper_pid()
        assert helper is not None
        with open(f"/proc/{helper}/status") as fh:
            assert "\nState:\tT" not in fh.read()  # never stopped
    finally:
        attacker.kill()
        attacker.wait(timeout=10)
