"""The gate a run starts behind (provisioning/gate.py): nothing runs before the gateway set
its limits and let it go, the prompt after the gate's line reaches the runner untouched,
and a gate never opened runs nothing."""

from __future__ import annotations

import resource
import subprocess
from pathlib import Path

import pytest
from home_support import gated_run

from provisioning import gate
from provisioning.rlimits import RunLimits

TIMEOUT_S = 30


def test_a_run_needs_the_gate_only_for_limits_or_a_cgroup(tmp_path: Path) -> None:
    assert not gate.needed(RunLimits(), [])
    assert gate.needed(RunLimits(cpu_s=5), [])
    assert gate.needed(RunLimits(), [tmp_path / "cgroup.procs"])


def test_what_follows_the_gates_line_is_the_runners_stdin() -> None:
    proc = gate.start(["cat"], RunLimits(file_bytes=2**20), stdout=subprocess.PIPE)
    out, _ = proc.communicate(b"first line\nsecond\n", timeout=TIMEOUT_S)
    assert proc.returncode == 0
    assert out == b"first line\nsecond\n"


def test_the_limits_are_set_before_the_run_starts(tmp_path: Path) -> None:
    show = "import resource as r; print(*r.getrlimit(r.RLIMIT_CPU), *r.getrlimit(r.RLIMIT_CORE))"
    done = gated_run(["python3", "-c", show], RunLimits(cpu_s=9), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["9", "14", "0", "0"]


def test_a_gate_never_opened_runs_nothing(tmp_path: Path) -> None:
    """The gateway went away before it let the run go: end of file, exit GATE_FAILED."""
    marker = tmp_path / "ran"
    proc = subprocess.Popen(gate.gated(["touch", str(marker)]), stdin=subprocess.PIPE, cwd=tmp_path)
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=TIMEOUT_S) == gate.GATE_FAILED
    assert not marker.exists()


def test_a_cgroup_that_cannot_be_entered_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    missing = tmp_path / "no-such-cgroup" / "cgroup.procs"
    done = gated_run(["touch", str(marker)], procs_files=[missing], cwd=tmp_path)
    assert done.returncode == gate.GATE_FAILED
    assert not marker.exists()


def test_a_limit_the_kernel_refuses_is_an_error_naming_the_keys(tmp_path: Path) -> None:
    """A process the kernel will not give limits to (here: one that cannot exist, past
    ``pid_max``) makes a clear error saying how to run without them."""
    beyond = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    ours = resource.getrlimit(resource.RLIMIT_CPU)
    with pytest.raises(gate.RlimitsUnavailable, match=r"limits\.run_max_\*"):
        gate.set_limits(beyond, RunLimits(cpu_s=5))
    assert resource.getrlimit(resource.RLIMIT_CPU) == ours  # nobody else's limits set
