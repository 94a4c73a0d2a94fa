"""No resource limits on runs (hostile input: issue 21, item 5).

A run had the gateway's own limits: ``ulimit -u`` ~96k, address space and file size
unlimited, no CPU bound; one run started 1,500 processes. Now every run starts under
``limits.run_max_processes`` (per conversation account, isolated), ``run_max_memory_bytes``,
``run_max_cpu_s`` and ``run_max_file_bytes`` (each process), and a run killed by one is
answered with which limit and the key that raises it. Where the host lets the gateway make
cgroups (root here: cgroup v1; a delegated v2 elsewhere), each run also has one: its
memory and processes are bounded over the whole run, single-account runs included. The
real gateway in process, the web chat, a greedy runner (``greedy_runner.py``) as a real
subprocess; isolated as root with throwaway accounts, and single-account (the non-root
path's mode); every wait bounded.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from accounts_support import remove_accounts
from faults_support import Client, gateway_env, install_runner, running_gateway

from provisioning.cgroups import find_tree

pytestmark = pytest.mark.faults

ANSWER_BOUND_S = 60.0
GIB = 1024**3


@pytest.fixture(params=["isolated", "single-account"])
def env(
    request: pytest.FixtureRequest, tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]
) -> Iterator[dict[str, str]]:
    if request.param == "isolated" and os.geteuid() != 0:
        pytest.skip("isolated runs need root (CI runs as root)")
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    e["JAZZ_BRIDGE_ISOLATION"] = "on" if request.param == "isolated" else "off"
    install_runner(e, fake_dir, "greedy_runner.py")
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


@pytest.fixture
def cgroups(tmp_path: Path) -> bool:
    """Whether this host lets a gateway make a cgroup per run (as ``serve`` finds out)."""
    tree = find_tree(tmp_path / "probe-root")
    if tree is None:
        return False
    tree.close()
    return True


def isolated(env: dict[str, str]) -> bool:
    return env["JAZZ_BRIDGE_ISOLATION"] == "on"


async def answer(client: Client, thread: str, text: str) -> dict[str, Any]:
    await client.post(thread, text, user="greedy")
    found = await client.wait_role(thread, ("assistant", "error"), timeout=ANSWER_BOUND_S)
    return found[0]


async def test_a_run_starts_under_the_default_limits(env: dict[str, str]) -> None:
    """Without any limits key set, a run's rlimits are the defaults (the gateway's were
    unlimited but for ~96k processes): 512 processes when it has an account of its own,
    8 GiB of address space, 1800 s of CPU, 2 GiB files, no core files."""
    async with running_gateway(env) as (_, client):
        reply = await answer(client, "lim", "limits")
    assert reply["role"] == "assistant", reply
    found = json.loads(reply["text"].split("limits: ", 1)[1].split("\n")[0])
    assert found["memory_bytes"] == [8 * GIB, 8 * GIB]
    assert found["cpu_s"] == [1800, 1805]  # SIGXCPU first, SIGKILL 5 s of CPU later
    assert found["file_bytes"] == [2 * GIB, 2 * GIB]
    assert found["core"] == [0, 0]
    if isolated(env):
        assert found["processes"] == [512, 512]
    else:  # counted per uid: the gateway's own threads and every run share it
        assert found["processes"][0] != 512


async def test_a_run_cannot_start_more_processes_than_its_cap(
    env: dict[str, str], cgroups: bool
) -> None:
    """A run forking 200 processes with run_max_processes 40 gets fewer than 40 (its own
    process and its threads count); the gateway answers it and goes on. Single-account,
    the cap is its cgroup's (the rlimit counts per uid, which every run shares there)."""
    if not isolated(env) and not cgroups:
        pytest.skip("single-account, the process cap needs a cgroup per run: none here")
    env["JAZZ_BRIDGE_LIMITS__RUN_MAX_PROCESSES"] = "40"
    async with running_gateway(env) as (_, client):
        reply = await answer(client, "fork", "processes 200")
        assert reply["role"] == "assistant", reply
        started = int(reply["text"].split("processes started: ", 1)[1].split()[0])
        assert 0 < started < 40, reply["text"]
        again = await answer(client, "after", "hello")  # the gateway is fine
        assert "greedy runner: hello" in again["text"], again


async def test_a_run_writing_past_the_file_limit_is_told_which_limit(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_LIMITS__RUN_MAX_FILE_BYTES"] = str(4 * 1024 * 1024)
    async with running_gateway(env) as (_, client):
        reply = await answer(client, "file", f"bigfile {64 * 1024 * 1024}")
    assert reply["role"] == "error", reply
    text = reply["text"]
    assert "larger than 4 MiB" in text and "`limits.run_max_file_bytes`" in text, text
    assert "File too large" in text, text  # Python ignores SIGXFSZ: its write fails (EFBIG)


async def test_a_run_using_up_its_cpu_time_is_told_which_limit(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_LIMITS__RUN_MAX_CPU_S"] = "1"
    async with running_gateway(env) as (_, client):
        reply = await answer(client, "cpu", "burn")
    assert reply["role"] == "error", reply
    text = reply["text"]
    assert "used up its CPU time (1 s per process" in text, text
    assert "`limits.run_max_cpu_s`" in text, text


async def test_a_run_out_of_memory_is_told_which_limit(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_LIMITS__RUN_MAX_MEMORY_BYTES"] = str(512 * 1024 * 1024)
    async with running_gateway(env) as (_, client):
        reply = await answer(client, "mem", "hog")
    assert reply["role"] == "error", reply
    text = reply["text"]
    assert "likely ran out of memory" in text and "512 MiB" in text, text
    assert "`limits.run_max_memory_bytes`" in text, text


async def test_a_run_holding_more_memory_together_than_its_limit_is_told_so(
    env: dict[str, str], cgroups: bool
) -> None:
    """Four processes of 192 MiB each are each far below a 512 MiB per-process limit: only
    a cgroup bounds them together. The kernel kills one, and the reply says the run ran out
    of memory, how much it may use together and the key that raises it."""
    if not cgroups:
        pytest.skip("a whole run's memory is bounded by its cgroup: this host lets make none")
    env["JAZZ_BRIDGE_LIMITS__RUN_MAX_MEMORY_BYTES"] = str(512 * 1024 * 1024)
    async with running_gateway(env) as (_, client):
        reply = await answer(client, "herd", "herd 4")
        assert reply["role"] == "error", reply
        text = reply["text"]
        assert "ran out of memory: together its processes may use at most 512 MiB" in text
        assert "`limits.run_max_memory_bytes`" in text, text
        within = await answer(client, "small-herd", "herd 2")  # 384 MiB together: fine
        assert within["role"] == "assistant" and "herd held" in within["text"], within


async def test_limits_set_to_zero_leave_a_run_the_gateways_own(env: dict[str, str]) -> None:
    for key in ("PROCESSES", "MEMORY_BYTES", "CPU_S", "FILE_BYTES"):
        env[f"JAZZ_BRIDGE_LIMITS__RUN_MAX_{key}"] = "0"
    async with running_gateway(env) as (_, client):
        reply = await answer(client, "none", "limits")
    found = json.loads(reply["text"].split("limits: ", 1)[1].split("\n")[0])
    import resource

    assert found["memory_bytes"] == list(resource.getrlimit(resource.RLIMIT_AS))
    assert found["file_bytes"] == list(resource.getrlimit(resource.RLIMIT_FSIZE))
    assert found["cpu_s"] == list(resource.getrlimit(resource.RLIMIT_CPU))
