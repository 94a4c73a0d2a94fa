"""Starting a run's process (bridge/runner/spawn.py): the ``started`` hook runs while the
process exists and before its pipes are streams, and what the hook raises leaves no
process behind (the gate of a run whose limits were refused: provisioning/gate.py)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from bridge.runner.spawn import start_process
from provisioning import gate
from provisioning.rlimits import RunLimits

BOUND_S = 20


class Refused(Exception):
    pass


async def test_a_hook_that_raises_kills_the_process_and_raises(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    seen: list[int] = []

    def refuse(pid: int, stdin_fd: int) -> None:
        seen.append(pid)
        raise Refused("no limits for you")

    with pytest.raises(Refused):
        await start_process(gate.gated(["touch", str(marker)]), refuse, cwd=tmp_path)
    [pid] = seen
    with pytest.raises(ChildProcessError):  # killed and reaped: no zombie of ours
        os.waitpid(pid, os.WNOHANG)
    assert not marker.exists()  # it never got past the gate


async def test_the_gate_opened_in_the_hook_lets_the_run_read_its_stdin(tmp_path: Path) -> None:
    def opened(pid: int, stdin_fd: int) -> None:
        gate.open_gate(pid, stdin_fd, RunLimits(cpu_s=30))

    show = "import resource, sys; print(sys.stdin.read(), resource.getrlimit(resource.RLIMIT_CPU))"
    child = await start_process(gate.gated(["python3", "-c", show]), opened)
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(b"the prompt")
    child.stdin.close()
    out = await asyncio.wait_for(child.stdout.read(), BOUND_S)
    assert await asyncio.wait_for(child.wait(), BOUND_S) == 0
    assert out.decode().split(None, 2) == ["the", "prompt", "(30, 35)\n"]
