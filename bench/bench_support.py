"""What the benchmarks share: percentiles, CPU clocks and the result table; and what the
pipeline benchmark measures with and against: throwaway accounts for the isolated runs, the
bare spawner of the runner (the baseline), the runner's answers and the web client that
sends the messages (bench_pipeline.py runs them).
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import json
import math
import os
import pwd
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp

from bridge.runner.killer import AccountKillError, kill_account
from bridge.runner.spawn import start_process
from provisioning.sandbox import setpriv_path

RUNNER_SRC = Path(__file__).resolve().parent / "instant_runner.py"
UID_BLOCK = 1000
UID_CANDIDATES = (77000, 76000, 75000, 74000, 78000, 71000, 72000)
CLIENT_CONCURRENCY = 64
ISOLATED_UMASK = 0o027
# what the CLI backend appends to runner.command (the baseline passes the same argv)
GATEWAY_ARGS = [
    "run",
    "--json",
    "--no-tui",
    "--agent",
    "default",
    "--conversation",
    "web:bench#1",
    "--approval-policy",
    "low-risk",
    "--events",
    "tools,reasoning,text,approval,subagent,spend",
    "--interactive-stdin",
    "--input-stdin",
    "--timeout",
    "900000",
]


def pct(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def cpu_s(who: int = resource.RUSAGE_SELF) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


# -- accounts -------------------------------------------------------------------------------


def free_uid_block() -> tuple[int, int]:
    """A block of uids (and the same gids) no account or group on this host has."""
    uids = {p.pw_uid for p in pwd.getpwall()}
    gids = {g.gr_gid for g in grp.getgrall()}
    for lo in UID_CANDIDATES:
        block = set(range(lo, lo + UID_BLOCK))
        if not block & uids and not block & gids:
            return lo, lo + UID_BLOCK - 1
    raise SystemExit(f"no free block of {UID_BLOCK} uids/gids among {UID_CANDIDATES}")


def quiet(argv: list[str]) -> bool:
    return subprocess.run(argv, capture_output=True, check=False).returncode == 0


@dataclass
class Throwaway:
    """One system account for the baseline (root only), removed at the end."""

    name: str
    uid: int
    home: Path
    made: bool = False

    def create(self) -> None:
        subprocess.run(["groupadd", "--gid", str(self.uid), self.name], check=True)
        self.made = True
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--no-user-group",
                "--no-log-init",
                "--uid",
                str(self.uid),
                "--gid",
                str(self.uid),
                "--home-dir",
                str(self.home),
                "--shell",
                "/usr/sbin/nologin",
                self.name,
            ],
            check=True,
            capture_output=True,  # "uid greater than SYS_UID_MAX" is expected
        )
        self.home.mkdir(mode=0o700)
        os.chown(self.home, self.uid, self.uid)

    def remove(self) -> None:
        if self.made:
            quiet(["userdel", self.name])
            quiet(["groupdel", self.name])


def remove_gateway_accounts(root: Path) -> int:
    """userdel/groupdel every ``jb-*`` account the gateway recorded under ``root`` (after
    killing what still runs as it: ``userdel`` refuses an account with processes)."""
    try:
        doc = json.loads((root / "state" / "accounts.json").read_text())
    except (OSError, ValueError):
        return 0
    removed = 0
    for entry in (doc.get("accounts") or {}).values():
        name = str(entry.get("name", ""))
        if name.startswith("jb-"):
            uid = entry.get("uid")
            if isinstance(uid, int) and uid > 0:
                with contextlib.suppress(AccountKillError):
                    kill_account(uid)
            removed += quiet(["userdel", name])
            quiet(["groupdel", name])
    return removed


# -- the baseline: just spawning the runner -------------------------------------------------


@dataclass
class Spawner:
    argv: list[str]
    kwargs: dict[str, Any]

    async def once(self, prompt: str) -> float:
        frame = (json.dumps({"prompt": prompt}) + "\n").encode()
        t0 = time.perf_counter()
        # started as the CLI backend starts a run (Popen on the loop, exit seen on a pidfd)
        proc = await start_process(self.argv, **self.kwargs)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        proc.stdin.write(frame)
        await proc.stdin.drain()
        proc.stdin.close()
        out, err, _ = await asyncio.gather(proc.stdout.read(), proc.stderr.read(), proc.wait())
        elapsed = time.perf_counter() - t0
        if proc.returncode != 0 or not out.startswith(b'{"ok": true'):
            raise SystemExit(f"the runner failed ({proc.returncode}): {out[:200]!r} {err[-500:]!r}")
        return elapsed

    async def rate(self, n: int, concurrency: int) -> dict[str, float]:
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with sem:
                await self.once(f"m{i}")

        cpu0, kids0 = cpu_s(), cpu_s(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        elapsed = time.perf_counter() - t0
        return {
            "rate": n / elapsed,
            "cpu_ms": (cpu_s() - cpu0) / n * 1000,
            "kids_ms": (cpu_s(resource.RUSAGE_CHILDREN) - kids0) / n * 1000,
        }


def spawner(argv: list[str], account: Throwaway | None, workdir: Path) -> Spawner:
    """Started like the CLI backend starts a run (see provisioning.sandbox.RunIdentity)."""
    home = str(account.home if account else workdir)
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "JAZZ_HOME": home,
        "JAZZ_SURFACE": "web",
        "JAZZ_NO_TUI": "1",
        "JAZZ_DISABLE_UPDATE_CHECK": "1",
        "HOME": home,
        "TMPDIR": f"{home}/tmp",
        "JAZZ_RUN_TAG": "0" * 24,
    }
    for name in ("LANG", "TZ"):
        if name in os.environ:
            env[name] = os.environ[name]
    if account is not None:
        env.update(USER=account.name, LOGNAME=account.name)
    kwargs: dict[str, Any] = {
        "env": env,
        "umask": ISOLATED_UMASK if account else 0o077,
        "start_new_session": True,
        "cwd": home,
        "close_fds": True,
    }
    command = [*argv, *GATEWAY_ARGS]
    if account is not None:
        setpriv = setpriv_path()
        if setpriv is not None:  # what the gateway does (vfork stays possible)
            command = [setpriv, f"--reuid={account.uid}", f"--regid={account.uid}"]
            command += ["--clear-groups", "--", *argv, *GATEWAY_ARGS]
        else:
            kwargs.update(user=account.uid, group=account.uid, extra_groups=[])
    return Spawner(command, kwargs)


# -- the gateway ----------------------------------------------------------------------------


@dataclass
class Answers:
    """Assistant answers per thread as the event streams deliver them, with arrival times."""

    times: dict[str, list[float]] = field(default_factory=dict)
    waiters: dict[str, list[tuple[int, asyncio.Future[float]]]] = field(default_factory=dict)

    def count(self, thread: str) -> int:
        return len(self.times.get(thread, ()))

    def add(self, thread: str) -> None:
        arrivals = self.times.setdefault(thread, [])
        arrivals.append(time.perf_counter())
        pending = []
        for target, fut in self.waiters.get(thread, []):
            if len(arrivals) >= target:
                if not fut.done():
                    fut.set_result(arrivals[target - 1])
            else:
                pending.append((target, fut))
        self.waiters[thread] = pending

    async def wait(self, thread: str, target: int) -> float:
        """Until ``thread`` has ``target`` answers; returns when the target-th one arrived."""
        arrivals = self.times.get(thread, [])
        if len(arrivals) >= target:
            return arrivals[target - 1]
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.waiters.setdefault(thread, []).append((target, fut))
        return await fut


class Client:
    def __init__(self, base: str) -> None:
        self.base = base
        self.answers = Answers()
        self.sem = asyncio.Semaphore(CLIENT_CONCURRENCY)
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=CLIENT_CONCURRENCY),
            timeout=aiohttp.ClientTimeout(total=60),
        )
        self.sse = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
        )
        self.followers: list[asyncio.Task[None]] = []

    async def close(self) -> None:
        for task in self.followers:
            task.cancel()
        await asyncio.gather(*self.followers, return_exceptions=True)
        await self.http.close()
        await self.sse.close()

    async def post(self, thread: str, text: str) -> float:
        """POST one message; returns the time to its 202 (intake latency)."""
        async with self.sem:
            t0 = time.perf_counter()
            async with self.http.post(
                f"{self.base}/api/threads/{thread}/messages", json={"user": "bench", "text": text}
            ) as resp:
                body = await resp.read()
                if resp.status != 202:
                    raise RuntimeError(f"POST {thread}: {resp.status} {body[:200]!r}")
            return time.perf_counter() - t0

    async def messages(self, thread: str) -> list[dict[str, Any]]:
        async with (
            self.sem,
            self.http.get(f"{self.base}/api/threads/{thread}/messages") as resp,
        ):
            data = await resp.json()
        return list(data["messages"])

    async def follow(self, threads: Sequence[str]) -> None:
        """Subscribe to each thread's event stream; returns once every one is connected."""

        async def subscribe(thread: str) -> aiohttp.ClientResponse:
            resp = await self.sse.get(f"{self.base}/api/threads/{thread}/events")
            if resp.status != 200:
                raise RuntimeError(f"events {thread}: {resp.status}")
            await resp.content.readline()  # ": connected": the queue is registered
            return resp

        async def read(thread: str, resp: aiohttp.ClientResponse) -> None:
            try:
                async for raw in resp.content:
                    if not raw.startswith(b"data: "):
                        continue
                    event = json.loads(raw[6:])
                    if event.get("type") == "message" and event.get("role") == "assistant":
                        self.answers.add(thread)
            finally:
                resp.release()

        responses = await asyncio.gather(*(subscribe(t) for t in threads))
        for thread, resp in zip(threads, responses, strict=True):
            self.followers.append(asyncio.create_task(read(thread, resp)))

    async def wait_all(self, targets: dict[str, int], timeout: float) -> None:
        waits = (self.answers.wait(t, n) for t, n in targets.items())
        try:
            await asyncio.wait_for(asyncio.gather(*waits), timeout)
        except TimeoutError:
            short = [t for t, n in targets.items() if self.answers.count(t) < n]
            raise SystemExit(
                f"timed out after {timeout:.0f}s; {len(short)} threads short of their answers"
            ) from None


def table(rows: list[tuple[str, str, str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = []
    for i, row in enumerate(rows):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if i == 0:
            lines.append("|-" + "-|-".join("-" * w for w in widths) + "-|")
    return "\n".join(lines)
