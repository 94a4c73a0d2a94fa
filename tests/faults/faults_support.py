"""Helpers of the fault suite: the gateway harness, runners of its own, what /proc says.

The suite drives the real gateway (``tests/bridge/gateway_harness.py``) with runners that
misbehave on purpose, and judges the aftermath from ``/proc``: which processes of a run
are still there (by uid, session, process group or pid), zombies among the gateway's
children, and the gateway's peak memory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "bridge"))

from gateway_harness import (  # noqa: E402
    Client,
    gateway_env,
    running_gateway,
    wait_until,
)

from bridge.runner.command import shared_interpreter  # noqa: E402

__all__ = [
    "Client",
    "ProcInfo",
    "gateway_env",
    "install_runner",
    "leftovers",
    "notes",
    "running_gateway",
    "serve",
    "wait_until",
]


def install_runner(env: dict[str, str], fake_dir: Path, name: str) -> Path:
    """Copy one of this directory's runners into ``fake_dir`` and make it the runner."""
    target = fake_dir / name
    shutil.copyfile(HERE / name, target)
    os.chmod(target, 0o755)
    env["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps([shared_interpreter(), str(target)])
    return target


def notes(fake_dir: Path) -> list[dict[str, Any]]:
    """What the runners noted (one JSON file per process), oldest first."""
    found = []
    for path in fake_dir.glob("note-*.json"):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # being replaced right now
    return sorted(found, key=lambda n: n["t"])


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    state: str
    ppid: int
    pgrp: int
    session: int
    uid: int
    cmd: str

    def __str__(self) -> str:
        return (
            f"pid {self.pid} ({self.cmd!r}, state {self.state}, uid {self.uid}, "
            f"ppid {self.ppid}, pgrp {self.pgrp}, session {self.session})"
        )


def proc_info(pid: int) -> ProcInfo | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read().decode("utf-8", "replace")
        with open(f"/proc/{pid}/status", "rb") as fh:
            status = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    cmd, rest = data[data.index("(") + 1 : data.rindex(")")], data[data.rindex(")") + 2 :]
    fields = rest.split()
    uid = re.search(r"^Uid:\s+(\d+)", status, re.M)
    return ProcInfo(
        pid=pid,
        state=fields[0],
        ppid=int(fields[1]),
        pgrp=int(fields[2]),
        session=int(fields[3]),
        uid=int(uid.group(1)) if uid else -1,
        cmd=cmd,
    )


def all_procs() -> list[ProcInfo]:
    infos = (proc_info(int(n)) for n in os.listdir("/proc") if n.isdigit())
    return [p for p in infos if p is not None]


def leftovers(
    *, uids: set[int] = frozenset(), pids: set[int] = frozenset(), sessions: set[int] = frozenset()
) -> list[ProcInfo]:
    """Processes (zombies included) of these uids, these pids, or in these sessions/groups.

    Also every zombie child of this process (the in-process gateway must reap its runs).
    Not a zombie that init holds: an orphan whose parent died is init's to reap (it runs
    nothing and holds nothing), and init reaps it in its own time.
    """
    me = os.getpid()
    return [
        p
        for p in all_procs()
        if p.pid != me
        and not (p.state == "Z" and p.ppid == 1)
        and (
            p.uid in uids
            or p.pid in pids
            or p.session in sessions
            or p.pgrp in sessions
            or (p.ppid == me and p.state == "Z")
        )
    ]


def run_pids(fake_dir: Path) -> tuple[set[int], set[int], set[int]]:
    """(uids, pids, sessions) of every process the runners noted, and of their children."""
    uids: set[int] = set()
    pids: set[int] = set()
    sessions: set[int] = set()
    for n in notes(fake_dir):
        pids.add(int(n["pid"]))
        pids.update(int(c) for c in n.get("children", []))
        sessions.update((int(n["sid"]), int(n["pgid"])))
        if int(n["uid"]) != 0 and int(n["uid"]) != os.getuid():
            uids.add(int(n["uid"]))
    sessions -= {os.getsid(0), os.getpgid(0)}  # a run never shares ours; never match us
    return uids, pids, sessions


async def nothing_left(fake_dir: Path, timeout: float = 15.0) -> None:
    """Wait (bounded) until no process of any noted run is left; fail naming the rest."""
    uids, pids, sessions = run_pids(fake_dir)
    assert pids, "no runner noted its start"
    left: list[ProcInfo] = []

    def clean() -> bool:
        nonlocal left
        left = leftovers(uids=uids, pids=pids, sessions=sessions)
        return not left

    try:
        await wait_until(clean, timeout, "the run's processes to be gone")
    except AssertionError:
        raise AssertionError("left behind: " + "; ".join(map(str, left))) from None


def status_kib(field: str, pid: int | str = "self") -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    found = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    assert found, f"no {field} in /proc/{pid}/status"
    return int(found.group(1))


def reset_peak_rss(pid: int | str = "self") -> None:
    """Reset VmHWM (the peak resident set) of a process: ``echo 5 > clear_refs``."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def serve(
    env: dict[str, str], cwd: Path, *args: str, as_uid: int | None = None
) -> AsyncIterator[tuple[subprocess.Popen[bytes], Client]]:
    """The real ``jazz-bridge serve`` process (its own environment, its own /proc entry).

    ``as_uid``: started as that account (uid and gid alike, no groups) through ``setpriv``.
    """
    env = {**env, "JAZZ_BRIDGE_SERVER__PORT": str(free_port())}
    log_path = cwd / "serve.log"
    prefix = (
        []
        if as_uid is None
        else ["setpriv", f"--reuid={as_uid}", f"--regid={as_uid}", "--clear-groups", "--"]
    )
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "bridge.cli", "serve", *args],
            env=env,
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    base = f"http://127.0.0.1:{env['JAZZ_BRIDGE_SERVER__PORT']}"
    fake_dir = Path(json.loads(env["JAZZ_BRIDGE_RUNNER__EXTRA_ENV"])["FAKE_DIR"])
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:

            async def ready() -> bool:
                assert proc.poll() is None, log_path.read_text()[-3000:]
                try:
                    async with session.get(f"{base}/readyz") as r:
                        return r.status == 200
                except aiohttp.ClientError:
                    return False

            await wait_until(ready, 40, "the gateway to be ready")
            yield proc, Client(base, session, fake_dir)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        proc.wait(timeout=30)
