"""A run's own PID namespace and /proc (``provisioning.private_proc``): what it sees, how
its exit status comes through the init shell, that stop signals reach a runner without a
handler, and that what it leaves behind dies with it; and which host /proc already hides
other accounts' processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provisioning import private_proc

HELP_TIMEOUT_S = 60


def test_exit_code_behind_the_init_shell() -> None:
    assert private_proc.exit_code(143) == -signal.SIGTERM
    assert private_proc.exit_code(137) == -signal.SIGKILL
    assert private_proc.exit_code(129) == -1
    assert private_proc.exit_code(192) == -64
    for code in (0, 1, 3, 2, 128, 193, 255, -15):
        assert private_proc.exit_code(code) == code
    assert private_proc.exit_code(None) is None


PLAIN_PROC = "22 27 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw"
ROOT_FS = "27 1 0:25 / / rw,relatime shared:1 - overlay overlay rw,lowerdir=/l,upperdir=/u"
HIDING_PROC = (
    "612 22 0:52 / /proc rw,nosuid,nodev,noexec,relatime shared:230 - proc proc "
    "rw,hidepid=invisible"
)
HIDEPID_2 = "22 27 0:21 / /proc rw,relatime - proc proc rw,hidepid=2,gid=0"
OTHER_PROC = "90 27 0:60 / /run/other rw,relatime - proc proc rw,hidepid=invisible"


@pytest.mark.parametrize(
    ("lines", "hides"),
    [
        ([ROOT_FS, PLAIN_PROC, HIDING_PROC], True),  # ProtectProc=invisible on top
        ([ROOT_FS, PLAIN_PROC], False),
        ([ROOT_FS, HIDEPID_2], True),
        ([ROOT_FS, HIDING_PROC, PLAIN_PROC], False),  # the plain one is on top, the one seen
        ([ROOT_FS, PLAIN_PROC, OTHER_PROC], False),  # a hiding proc elsewhere hides nothing
        ([ROOT_FS], False),
    ],
    ids=["invisible-on-plain", "plain", "hidepid-2", "plain-on-invisible", "elsewhere", "none"],
)
def test_proc_hides_other_uids(tmp_path: Path, lines: list[str], hides: bool) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("\n".join(lines) + "\n")
    assert private_proc.proc_hides_other_uids(str(mountinfo)) is hides


def test_proc_hides_other_uids_without_mountinfo(tmp_path: Path) -> None:
    assert private_proc.proc_hides_other_uids(str(tmp_path / "missing")) is False


MARK = "61.2718281"  # an argument no other process has: a neighbour to look for


def cmdlines_seen(argv_prefix: list[str]) -> tuple[int, list[str]]:
    """How many pids, and which command lines, a process started with ``argv_prefix`` sees."""
    reader = (
        "import os, json\n"
        "pids = [e for e in os.listdir('/proc') if e.isdigit()]\n"
        "lines = []\n"
        "for p in pids:\n"
        "    try:\n"
        "        lines.append(open(f'/proc/{p}/cmdline', 'rb').read().replace(b'\\0', b' ')"
        ".decode())\n"
        "    except OSError:\n"
        "        pass\n"
        "print(json.dumps([len(pids), lines]))\n"
    )
    proc = subprocess.run(
        [*argv_prefix, sys.executable, "-c", reader],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=HELP_TIMEOUT_S,
        check=True,
    )
    count, lines = json.loads(proc.stdout)
    return count, lines


def skip_without_namespaces() -> None:
    """Skip where this host refuses the namespace (no unshare, user namespaces refused); a
    namespace that starts but whose /proc is not private is the code's failure, not a
    reason to skip: the test goes on and shows what was seen."""
    why = private_proc.unavailable_reason()
    if why is not None and "was not private" not in why:
        pytest.skip(f"runs here cannot have a private /proc: {why}")


def test_wrap_really_gives_a_private_proc() -> None:
    skip_without_namespaces()
    neighbour = subprocess.Popen(["sleep", MARK], stdin=subprocess.DEVNULL)
    try:
        count, lines = cmdlines_seen([])  # the host's /proc: the neighbour is there
        assert any(MARK in line for line in lines), lines
        count, lines = cmdlines_seen(private_proc.wrap([]))
        assert count <= 4, lines  # the init shell and the reader (the probe allows 4)
        assert not any(MARK in line for line in lines), lines
        assert any("listdir" in line for line in lines), lines  # itself it sees
    finally:
        neighbour.kill()
        neighbour.wait(timeout=10)


def test_wrap_passes_the_exit_status_through() -> None:
    skip_without_namespaces()
    code = subprocess.run(private_proc.wrap(["sh", "-c", "exit 3"]), timeout=30).returncode
    assert code == 3
    term = subprocess.run(private_proc.wrap(["sh", "-c", "kill -TERM $$"]), timeout=30)
    assert private_proc.exit_code(term.returncode) == -signal.SIGTERM


def test_a_stop_signal_reaches_a_runner_without_a_handler() -> None:
    """The kernel ignores SIGTERM for a namespace's init without a handler: the runner is
    not the init, so the gateway's SIGTERM to the run's group stops it."""
    skip_without_namespaces()
    proc = subprocess.Popen(
        private_proc.wrap([sys.executable, "-c", "import time; time.sleep(60)"]),
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.3)  # let the runner start: a signal before its exec reaches sh only
        os.killpg(proc.pid, signal.SIGTERM)
        assert private_proc.exit_code(proc.wait(timeout=10)) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def test_what_a_run_leaves_behind_dies_with_it(tmp_path: Path) -> None:
    """A daemon the run starts with setsid (out of its process group and session) is gone
    once the runner exits: the namespace goes with its init."""
    skip_without_namespaces()
    pidfile = tmp_path / "daemon.pid"
    script = f"setsid sleep 300 & echo $! > {pidfile}; exit 0"
    subprocess.run(private_proc.wrap(["sh", "-c", script]), timeout=30, check=True)
    inner = int(pidfile.read_text())
    assert inner < 10, "the daemon's pid is the namespace's"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = subprocess.run(["pgrep", "-f", "^sleep 300$"], capture_output=True, text=True)
        if not left.stdout.strip():
            break
        time.sleep(0.05)  # the kernel tears the namespace down (bounded)
    assert not left.stdout.strip(), f"sleep 300 outlived its run: {left.stdout}"
