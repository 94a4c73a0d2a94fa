"""A cgroup per run: found where the host allows one, limits over the whole run, nothing left.

Where to make them is read from a fake ``/proc/self/cgroup`` and mountinfo over a fake
delegated cgroup v2 directory (this machine class delegates no v2 controllers); what the
kernel does with them is proved on the host's own hierarchy as root (cgroup v1 here),
skipped with the reason where the host lets make none.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from home_support import gated_run

from provisioning.cgroups import CgroupTree, RunCgroup, find_tree, runs_dir_name
from provisioning.rlimits import RunLimits

EXIT_WAIT_S = 10.0  # bound on a killed process's end
MIB = 1024 * 1024


def fake_v2(tmp_path: Path, controllers: str) -> tuple[Path, Path, Path]:
    """A v2 hierarchy mounted at ``tmp/cg`` with the gateway in a service's cgroup."""
    mount = tmp_path / "cg"
    own = mount / "system.slice" / "jazz-bridge.service"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text(controllers + "\n")
    (own / "cgroup.procs").write_text("4242\n4243\n")
    (own / "cgroup.subtree_control").write_text("")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/system.slice/jazz-bridge.service\n")
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
        f"30 23 0:26 / {mount} rw,nosuid,nodev,noexec - cgroup2 cgroup2 rw,nsdelegate\n"
    )
    return own, proc, info


def test_a_delegated_v2_cgroup_holds_the_runs_with_memory_and_pids(tmp_path: Path) -> None:
    own, proc, info = fake_v2(tmp_path, "cpu io memory pids")
    root = tmp_path / "root"
    tree = find_tree(root, proc, info)
    assert tree is not None and tree.version == 2
    runs = own / runs_dir_name(root)
    assert tree.parents == {"memory": runs, "pids": runs}
    # the gateway's processes moved to a leaf: a v2 cgroup with processes has no children
    # with controllers
    assert (own / "gateway" / "cgroup.procs").read_text() == "4243"  # the last write
    assert (own / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (runs / "cgroup.subtree_control").read_text() == "+memory +pids"
    group = tree.make("run-abc", RunLimits(processes=40, memory_bytes=512 * MIB))
    run = runs / "run-abc"
    assert (run / "memory.max").read_text() == str(512 * MIB)
    assert (run / "memory.swap.max").read_text() == "0"
    assert (run / "pids.max").read_text() == "40"
    assert group.procs_files == [run / "cgroup.procs"]


def test_a_v2_cgroup_without_the_controllers_is_not_used(tmp_path: Path) -> None:
    own, proc, info = fake_v2(tmp_path, "cpu io")
    assert find_tree(tmp_path / "root", proc, info) is None
    assert not (own / "gateway").exists()  # nothing moved for nothing


def test_two_roots_keep_to_their_own_runs(tmp_path: Path) -> None:
    assert runs_dir_name(tmp_path / "a") != runs_dir_name(tmp_path / "b")
    assert runs_dir_name(tmp_path / "a") == runs_dir_name(tmp_path / "a")


# -- on the host's own hierarchy -----------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[CgroupTree]:
    found = find_tree(tmp_path / "root")
    if found is None:
        pytest.skip("this host lets the gateway make no cgroup (needs root, or a delegated v2)")
    yield found
    found.sweep()
    found.close()


def ended_within(pidfd: int, seconds: float = EXIT_WAIT_S) -> bool:
    """Whether the process behind ``pidfd`` ended within ``seconds`` (readable: it did)."""
    ready, _, _ = select.select([pidfd], [], [], seconds)
    return bool(ready)


def daemon_in(group: RunCgroup) -> int:
    """Start a run in ``group`` that leaves a ``setsid`` daemon behind; the daemon's pid."""
    script = "setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $!"
    done = gated_run(["/bin/sh", "-c", script], procs_files=group.procs_files)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def test_everything_a_run_started_is_killed_and_its_cgroup_removed(tree: CgroupTree) -> None:
    group = tree.make("run-daemon", RunLimits(processes=64, memory_bytes=256 * MIB))
    daemon = daemon_in(group)
    pidfd = os.pidfd_open(daemon)
    try:
        assert daemon in group.pids()  # another session, still the run's
        hit, left = group.finish()
        assert (hit, left) == (None, 1)
        assert ended_within(pidfd)
    finally:
        os.close(pidfd)
    assert all(not d.exists() for d in group.dirs.values())


def test_a_run_over_its_memory_together_is_killed_and_says_memory(tree: CgroupTree) -> None:
    group = tree.make("run-memory", RunLimits(memory_bytes=64 * MIB))
    touch = "x = bytearray(256 * 1024 * 1024); x[::4096] = b'1' * len(x[::4096])"
    done = gated_run([sys.executable, "-c", touch], procs_files=group.procs_files, timeout=60)
    assert done.returncode != 0
    assert group.finish() == ("memory", 0)


def test_a_run_refused_a_process_says_processes(tree: CgroupTree) -> None:
    group = tree.make("run-forks", RunLimits(processes=5))
    forks = "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 600 & done"  # left running
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}  # the forks hold none
    gated_run(["/bin/sh", "-c", forks], procs_files=group.procs_files, timeout=60, **quiet)
    hit, left = group.finish()
    assert hit == "processes"
    assert 0 < left < 5  # those the cap let start, killed


def test_what_a_dead_gateway_left_is_killed_at_the_next_start(
    tree: CgroupTree, tmp_path: Path
) -> None:
    group = tree.make("run-orphaned", RunLimits(processes=64))
    daemon = daemon_in(group)
    pidfd = os.pidfd_open(daemon)
    try:
        again = find_tree(tmp_path / "root")  # the next gateway on the same root
        assert again is not None
        assert ended_within(pidfd)
    finally:
        os.close(pidfd)
    assert all(not d.exists() for d in group.dirs.values())
    again.close()
    assert all(not p.exists() for p in tree.parents.values())  # nothing left at stop
