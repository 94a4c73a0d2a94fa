"""A run's resource limits (provisioning/rlimits.py): the command they start under, which
limit a run's end points to, and the limits themselves on real processes."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from provisioning.rlimits import LimitHit, RunLimits, prlimit_path

TIMEOUT_S = 30


def run(limits: RunLimits, script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        limits.wrap(["sh", "-c", script]),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def test_no_limits_leave_the_command_as_it_is() -> None:
    assert RunLimits().wrap(["jazz", "run"]) == ["jazz", "run"]


def test_every_limit_goes_to_prlimit_outermost() -> None:
    limits = RunLimits(processes=64, memory_bytes=2**30, cpu_s=10, file_bytes=2**20)
    argv = limits.wrap(["setpriv", "--", "jazz"])
    assert argv[0] == prlimit_path()
    assert argv[1:-4] == [
        "--core=0:0",
        "--nproc=64:64",
        f"--as={2**30}:{2**30}",
        f"--fsize={2**20}:{2**20}",
        "--cpu=10:15",
    ]
    assert argv[-4:] == ["--", "setpriv", "--", "jazz"]


def test_no_limit_goes_above_the_gateways_own_hard_limit(tmp_path: Path) -> None:
    """A gateway whose hard limits are lower than the configured ones (a unit's, a
    container's) cannot raise them: each is capped there and the run still starts."""
    gateway = RunLimits(file_bytes=3 * 2**20, cpu_s=20).wrap(
        [sys.executable, "-c", RAISE_AND_START, str(10 * 2**20)]
    )
    done = subprocess.run(
        gateway, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(3 * 2**20), "25"], done.stdout  # 20 + the grace


# run under lowered hard limits: build a run's limits above them and start it
RAISE_AND_START = """
import resource, subprocess, sys
from provisioning.rlimits import RunLimits
want = int(sys.argv[1])
show = "import resource as r; print(r.getrlimit(r.RLIMIT_FSIZE)[1], r.getrlimit(r.RLIMIT_CPU)[1])"
argv = RunLimits(file_bytes=want, cpu_s=60).wrap(["python3", "-c", show])
sys.exit(subprocess.run(argv).returncode)
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
    proc = subprocess.run(
        limits.wrap(["sh", "-c", "while :; do :; done"]),
        cwd=tmp_path,
        capture_output=True,
        timeout=TIMEOUT_S,
        check=False,
    )
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
