"""A run's resource limits (provisioning/rlimits.py): the kernel limits they set, which
limit a run's end points to, and the limits themselves on real processes (started behind
the gate, provisioning/gate.py, as the gateway starts its runs)."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from home_support import gated_run

from provisioning.rlimits import LimitHit, RunLimits

TIMEOUT_S = 30


def run(limits: RunLimits, script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return gated_run(["sh", "-c", script], limits, timeout=TIMEOUT_S, cwd=cwd)


def test_no_limits_set_only_no_core_files() -> None:
    assert RunLimits().settings() == [(resource.RLIMIT_CORE, (0, 0))]
    assert not RunLimits().any


def test_every_limit_is_set_soft_and_hard_cpu_with_a_grace() -> None:
    limits = RunLimits(processes=64, memory_bytes=2**30, cpu_s=10, file_bytes=2**20)
    assert limits.settings() == [
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_NPROC, (64, 64)),
        (resource.RLIMIT_AS, (2**30, 2**30)),
        (resource.RLIMIT_FSIZE, (2**20, 2**20)),
        (resource.RLIMIT_CPU, (10, 15)),
    ]


def test_no_limit_goes_above_the_gateways_own_hard_limit(tmp_path: Path) -> None:
    """A gateway whose hard limits are lower than the configured ones (a unit's, a
    container's) cannot raise them: each is capped there and the run still starts."""
    gateway = [sys.executable, "-c", RAISE_AND_START, str(10 * 2**20)]
    done = subprocess.run(
        gateway, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(3 * 2**20), "25"], done.stdout  # 20 + the grace


# run under lowered hard limits: build a run's limits above them and start it
RAISE_AND_START = """
import resource, sys
from provisioning import gate
from provisioning.rlimits import RunLimits
resource.setrlimit(resource.RLIMIT_FSIZE, (3 * 2**20, 3 * 2**20))
resource.setrlimit(resource.RLIMIT_CPU, (25, 25))
want = int(sys.argv[1])
show = "import resource as r; print(r.getrlimit(r.RLIMIT_FSIZE)[1], r.getrlimit(r.RLIMIT_CPU)[1])"
proc = gate.start(["python3", "-c", show], RunLimits(file_bytes=want, cpu_s=60))
proc.communicate(b"")
sys.exit(proc.returncode)
"""


def test_a_shared_account_gets_no_process_cap() -> None:
    limits = RunLimits(processes=64, memory_bytes=2**30)
    assert limits.for_account(True) == limits
    assert limits.for_account(False) == RunLimits(memory_bytes=2**30)


def test_the_limits_hold_in_the_started_process(tmp_path: Path) -> None:
    limits = RunLimits(memory_bytes=3 * 2**30, cpu_s=7, file_bytes=5 * 2**20)
    done = run(limits, "ulimit -v; ulimit -t; ulimit -f; ulimit -c", tmp_path)
    assert done.returncode == 0, done.stderr
    # sh reports KiB, seconds, blocks of 512 bytes (dash; bash: 1024) and core blocks
    v, t, f, c = done.stdout.split()
    assert int(v) == 3 * 2**20
    assert int(t) == 7
    assert int(f) in (5 * 2**20 // 512, 5 * 2**20 // 1024)
    assert c == "0"


def test_a_file_past_the_limit_kills_with_sigxfsz_and_says_so(tmp_path: Path) -> None:
    limits = RunLimits(file_bytes=2**20)
    done = run(limits, "head -c 8388608 /dev/zero > big.bin", tmp_path)
    assert done.returncode != 0
    assert (tmp_path / "big.bin").stat().st_size == 2**20
    # the shell reports its child's death by SIGXFSZ as 128+25; asyncio as -25
    assert limits.hit(-signal.SIGXFSZ, []) is LimitHit.FILE_SIZE


def test_cpu_time_past_the_limit_ends_the_process_with_sigxcpu(tmp_path: Path) -> None:
    limits = RunLimits(cpu_s=1)
    proc = run(limits, "while :; do :; done", tmp_path)
    assert proc.returncode == -signal.SIGXCPU
    assert limits.hit(proc.returncode, []) is LimitHit.CPU


@pytest.mark.parametrize(
    ("limits", "exit_code", "stderr", "hit"),
    [
        (RunLimits(cpu_s=5), -signal.SIGXCPU, [], LimitHit.CPU),
        (RunLimits(), -signal.SIGXCPU, [], None),  # a signal of its own, no limit set
        (RunLimits(file_bytes=1), 1, ["OSError: [Errno 27] File too large"], LimitHit.FILE_SIZE),
        (
            RunLimits(memory_bytes=1),
            1,
            ["FATAL ERROR: JavaScript heap out of memory"],
            LimitHit.MEMORY,
        ),
        (RunLimits(memory_bytes=1), 134, ["terminate called: std::bad_alloc"], LimitHit.MEMORY),
        (RunLimits(processes=9), 1, ["sh: 1: Cannot fork"], LimitHit.PROCESSES),
        (RunLimits(processes=9), 1, ["Error: provider said 500"], None),
        (RunLimits(), 1, ["fatal: out of memory"], None),
    ],
)
def test_which_limit_a_failed_run_points_to(
    limits: RunLimits, exit_code: int, stderr: list[str], hit: LimitHit | None
) -> None:
    assert limits.hit(exit_code, stderr) is hit
