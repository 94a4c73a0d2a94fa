"""Killing an account's every process (``bridge.runner.killer``): never root's, a fork
chain no ``/proc`` scan can see, an account that signals everything it may, and the
helper that does it kept and started again when it died.

Real processes run as ``nobody`` (root needed) where the test says so.
"""

from __future__ import annotations

import os
import select
import subprocess
import time

import pytest

from bridge.runner import killer, procs


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
