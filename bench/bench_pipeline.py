"""The whole pipeline with an instant runner, against just spawning that runner.

Baseline ("the limit"): this machine spawning ``bench/instant_runner.py`` directly, the way
the CLI backend starts a process (``bridge.runner.spawn``, through ``setpriv`` when
installed), at the gateway's concurrency, as the same kind of identity (as root: a
throwaway account, no supplementary groups, own session, umask 027), with the same argv
and stdin frame, measured right before and right after each gateway
run (the mean is the limit, so drift on a shared machine shows). Then the real gateway (in
process: web API, SQLite, one Unix account per conversation when root) answers messages
across many conversations over HTTP, after a warm-up message per conversation (accounts
and homes are made there, reported apart). Answers are seen on each thread's server-sent
event stream (no sleeps, bounded deadlines) and checked against ``GET .../messages``
afterwards. Last, the latency the gateway adds beyond the runner's own wall time: one
message at a time, each alternating with one spawn of the runner alone (p50/p99).

Every account the run created (the throwaway one and the gateway's ``jb-*`` accounts) and
every temp dir is removed at the end, also on failure or Ctrl-C. Prints one table.

    .venv/bin/python bench/bench_pipeline.py [--messages 640] [--conversations 64]
        [--concurrency 4 8] [--sequential 100] [--profile FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import grp
import json
import logging
import math
import os
import pstats
import pwd
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp

from bridge.app import GatewayApp
from bridge.config import load_settings
from bridge.plugins import load_specs
from bridge.runner.command import shared_interpreter
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


def gateway_env(root: Path, argv: list[str], level: int, per: int, uids: tuple[int, int]) -> dict:
    env = {
        "JAZZ_BRIDGE_ROOT": str(root),
        "JAZZ_BRIDGE_ISOLATION": "on" if os.geteuid() == 0 else "off",
        "JAZZ_BRIDGE_SERVER__PORT": "0",
        "JAZZ_BRIDGE_RUNNER__COMMAND": json.dumps(argv),
        "JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS": str(level),
        # every message is the one user "bench"'s: the gateway's cap is what is measured
        "JAZZ_BRIDGE_LIMITS__MAX_RUNS_PER_USER": "0",
        "JAZZ_BRIDGE_LIMITS__MAX_QUEUED_PER_CONVERSATION": str(max(5, per + 5)),
        "JAZZ_BRIDGE_PROGRESS__FIRST_AFTER_S": "3600",
        "JAZZ_BRIDGE_ACCOUNTS__UID_MIN": str(uids[0]),
        "JAZZ_BRIDGE_ACCOUNTS__UID_MAX": str(uids[1]),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }
    return env


async def gateway_run(
    env: dict[str, str],
    *,
    tag: str,
    messages: int,
    conversations: int,
    sequential: int,
    seq_threads: int,
    seq_spawner: Spawner | None,
    timeout: float,
    profile: cProfile.Profile | None,
) -> dict[str, Any]:
    specs = load_specs()
    settings = load_settings(
        None, adapter_sections={k: s.settings_model for k, s in specs.items()}, environ=env
    )
    out: dict[str, Any] = {}
    app = GatewayApp(settings, specs)
    t0 = time.perf_counter()
    try:
        await app.initialize()
        await app.start()
    except BaseException:
        await app.stop()
        raise
    out["startup_s"] = time.perf_counter() - t0
    client = Client(f"http://127.0.0.1:{app.port}")
    try:
        threads = [f"bench-{tag}-{i}" for i in range(conversations)]
        await client.follow(threads)

        # warm-up: one message per conversation (accounts and homes are made here)
        t0 = time.perf_counter()
        await asyncio.gather(*(client.post(t, "warm up") for t in threads))
        await client.wait_all({t: 1 for t in threads}, timeout)
        out["warmup_s"] = time.perf_counter() - t0

        # throughput: every message at once (client concurrency bounded)
        per = max(1, messages // conversations)
        total = per * conversations
        if profile is not None:
            profile.enable()
        cpu0 = cpu_s()
        t0 = time.perf_counter()
        intake = await asyncio.gather(
            *(client.post(t, f"m{j} {t}") for j in range(per) for t in threads)
        )
        await client.wait_all({t: 1 + per for t in threads}, timeout)
        elapsed = time.perf_counter() - t0
        cpu = cpu_s() - cpu0
        if profile is not None:
            profile.disable()
        out.update(
            total=total,
            rate=total / elapsed,
            cpu_ms=cpu / total * 1000,
            intake_p50=pct(intake, 50),
            intake_p99=pct(intake, 99),
        )

        # check the transcripts: every answer there, nothing failed; count the notices
        transcripts = await asyncio.gather(*(client.messages(t) for t in threads))
        notices = 0
        for thread, msgs in zip(threads, transcripts, strict=True):
            answers = [m for m in msgs if m["role"] == "assistant"]
            errors = [m for m in msgs if m["role"] == "error"]
            if len(answers) != 1 + per or errors:
                raise SystemExit(f"{thread}: {len(answers)} answers, {len(errors)} errors")
            bad = [m["text"] for m in answers if not m["text"].startswith("ok: ")]
            if bad:
                raise SystemExit(f"{thread}: unexpected answer {bad[0][:200]!r}")
            notices += sum(1 for m in msgs if m["role"] == "status")
        out["notices_per_msg"] = notices / (total + conversations)

        # added latency: one message at a time, POST until the answer is on the stream,
        # alternating with the runner alone (same loop, same moment, same kind of identity)
        if sequential and seq_spawner is not None:
            seq = [f"bench-{tag}-seq{i}" for i in range(seq_threads)]
            await client.follow(seq)
            await asyncio.gather(*(client.post(t, "warm up") for t in seq))
            await client.wait_all({t: 1 for t in seq}, timeout)
            lat: list[float] = []
            alone: list[float] = []
            for i in range(sequential + 5):
                alone.append(await seq_spawner.once(f"s{i}"))
                thread = seq[i % len(seq)]
                target = client.answers.count(thread) + 1
                t0 = time.perf_counter()
                await client.post(thread, f"s{i}")
                arrived = await asyncio.wait_for(client.answers.wait(thread, target), timeout)
                lat.append(arrived - t0)
            out["seq"], out["seq_alone"] = lat[5:], alone[5:]
    finally:
        await client.close()
        t0 = time.perf_counter()
        await app.stop()
        out["stop_s"] = time.perf_counter() - t0
    return out


# -- main -----------------------------------------------------------------------------------


def table(rows: list[tuple[str, str, str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = []
    for i, row in enumerate(rows):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if i == 0:
            lines.append("|-" + "-|-".join("-" * w for w in widths) + "-|")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=640, help="timed messages per level")
    ap.add_argument("--conversations", type=int, default=64)
    ap.add_argument(
        "--concurrency", type=int, nargs="+", default=[4, 8], help="max_concurrent_runs levels"
    )
    ap.add_argument("--sequential", type=int, default=100, help="messages for added latency")
    ap.add_argument("--seq-threads", type=int, default=4)
    ap.add_argument("--profile", type=Path, help="cProfile the first timed phase (event loop)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up on SIGTERM too
    load_before = os.getloadavg()[0]

    is_root = os.geteuid() == 0
    tmp = Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    os.chmod(tmp, 0o755)  # conversation accounts traverse it to their homes and the runner
    runner = tmp / "instant_runner.py"
    shutil.copyfile(RUNNER_SRC, runner)
    os.chmod(runner, 0o755)
    python = shared_interpreter()
    account: Throwaway | None = None
    roots: list[Path] = []
    rows: list[tuple[str, str, str]] = [("measure", "value", "ratio / note")]
    profile = cProfile.Profile() if args.profile else None
    try:
        lo, hi = free_uid_block()
        if is_root:
            account = Throwaway(f"jbbench{os.getpid() % 1_000_000}", hi, tmp / "spawn-home")
            account.create()
        who = "as a throwaway account" if account else "as this account (not root)"

        # the runner's own start-up: with and without site (-S -E); the faster is used
        variants = {"plain": [python, str(runner)], "-S -E": [python, "-S", "-E", str(runner)]}
        spawners = {name: spawner(argv, account, tmp) for name, argv in variants.items()}

        async def interleaved(rounds: int) -> dict[str, list[float]]:
            lat: dict[str, list[float]] = {name: [] for name in spawners}
            for _ in range(rounds):
                for name, sp in spawners.items():
                    lat[name].append(await sp.once("hello"))
            return {name: v[5:] for name, v in lat.items()}

        startup = {name: pct(v, 50) for name, v in asyncio.run(interleaved(45)).items()}
        best = min(startup, key=lambda k: startup[k])
        argv = variants[best]
        base = spawner(argv, account, tmp)
        for name, p50 in startup.items():
            note = "used below" if name == best else f"x{p50 / startup[best]:.2f} of the one used"
            rows.append((f"runner alone, sequential p50 ({name})", f"{p50 * 1000:.1f} ms", note))

        per = max(1, args.messages // args.conversations)
        results: list[tuple[int, dict[str, float], dict[str, Any]]] = []
        for n, level in enumerate(args.concurrency):
            before = asyncio.run(base.rate(per * args.conversations, level))
            root = tmp / f"root-c{level}"
            roots.append(root)
            env = gateway_env(root, argv, level, per, (lo, hi - 1))
            gw = asyncio.run(
                gateway_run(
                    env,
                    tag=f"c{level}",
                    messages=args.messages,
                    conversations=args.conversations,
                    sequential=args.sequential if n == 0 else 0,
                    seq_threads=args.seq_threads,
                    seq_spawner=base,
                    timeout=60 + 20 * per * args.conversations / before["rate"],
                    profile=profile if n == 0 else None,
                )
            )
            # the limit again right after: the mean of both brackets the gateway's run
            after = asyncio.run(base.rate(per * args.conversations, level))
            spawn = {k: (before[k] + after[k]) / 2 for k in before}
            spawn["before"], spawn["after"] = before["rate"], after["rate"]
            results.append((level, spawn, gw))

        for level, spawn, gw in results:
            rows.append(
                (
                    f"spawn baseline (the limit) @{level}, msgs/s",
                    f"{spawn['rate']:.1f}",
                    f"mean of {spawn['before']:.1f} before / {spawn['after']:.1f} after; {who}; "
                    f"CPU/msg: spawner {spawn['cpu_ms']:.1f} ms, runner {spawn['kids_ms']:.1f} ms",
                )
            )
            rows.append(
                (
                    f"gateway end to end @{level}, msgs/s",
                    f"{gw['rate']:.1f}",
                    f"x{gw['rate'] / spawn['rate']:.2f} of the limit (aim >= 0.7); "
                    f"{gw['total']} msgs / {args.conversations} convs",
                )
            )
            rows.append(
                (
                    f"  gateway process CPU per msg @{level}",
                    f"{gw['cpu_ms']:.1f} ms",
                    f"x{gw['cpu_ms'] / max(spawn['cpu_ms'], 1e-9):.1f} of the spawner's; "
                    f"{gw['cpu_ms'] * gw['rate'] / 10:.0f}% of one core (gateway + client)",
                )
            )
            rows.append(
                (
                    f"  intake POST->202 under load @{level}",
                    f"{gw['intake_p50'] * 1000:.1f} / {gw['intake_p99'] * 1000:.1f} ms",
                    f"p50 / p99; {gw['notices_per_msg']:.2f} status notices per msg",
                )
            )
            rows.append(
                (
                    f"  warm-up @{level} (one msg per new conversation)",
                    f"{gw['warmup_s']:.2f} s",
                    f"{args.conversations / gw['warmup_s']:.1f} convs/s (account + home each)",
                )
            )
            rows.append(
                (
                    f"  gateway start / stop @{level}",
                    f"{gw['startup_s']:.2f} / {gw['stop_s']:.2f} s",
                    "in process, fresh root",
                )
            )
        if args.sequential:
            seq_gw, seq_base = results[0][2]["seq"], results[0][2]["seq_alone"]
            b50, b99 = pct(seq_base, 50), pct(seq_base, 99)
            g50, g99 = pct(seq_gw, 50), pct(seq_gw, 99)
            paired = [g - b for g, b in zip(seq_gw, seq_base, strict=True)]
            rows += [
                (
                    "runner alone, sequential p50 / p99",
                    f"{b50 * 1000:.1f} / {b99 * 1000:.1f} ms",
                    f"{len(seq_base)} spawns alternating with the gateway's messages",
                ),
                (
                    "gateway POST->answer, sequential p50 / p99",
                    f"{g50 * 1000:.1f} / {g99 * 1000:.1f} ms",
                    f"{len(seq_gw)} msgs on {args.seq_threads} threads, SSE",
                ),
                (
                    "added latency p50",
                    f"{(g50 - b50) * 1000:.1f} ms",
                    f"gateway p50 - runner p50 (aim < 15 ms); x{g50 / b50:.2f} of the runner",
                ),
                (
                    "added latency p99",
                    f"{(g99 - b99) * 1000:.1f} ms",
                    f"gateway p99 - runner p99 (paired differences: p50 "
                    f"{pct(paired, 50) * 1000:.1f}, p99 {pct(paired, 99) * 1000:.1f} ms)",
                ),
            ]
    finally:
        for root in roots:
            remove_gateway_accounts(root)
        if account is not None:
            account.remove()
        shutil.rmtree(tmp, ignore_errors=True)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows.insert(
        1,
        (
            "machine",
            f"{os.cpu_count()} CPUs",
            f"{cpu_model()}; Python {sys.version.split()[0]}; load average {load_before:.2f} "
            f"at start, {os.getloadavg()[0]:.2f} at end",
        ),
    )
    rows.append(("max RSS of this process", f"{rss_mb:.0f} MB", "gateway + client + spawner"))
    print(table(rows))
    if profile is not None:
        profile.dump_stats(args.profile)
        stats = pstats.Stats(profile, stream=sys.stderr)
        stats.sort_stats("tottime").print_stats(20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
