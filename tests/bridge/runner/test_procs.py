"""Sweeping a run's leftovers: tagged processes that left the group are found and killed.

Real processes: ``setsid sleep`` started with a run tag, as a run's grandchild would be.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

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
