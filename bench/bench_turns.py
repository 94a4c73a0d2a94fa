"""The whole pipeline with an instant runner, against just spawning that runner.

Baseline ("the limit"): this machine spawning the same instant runner, with the same
concurrency and, as root, as a throwaway account, feeding it the same stdin frame. Then the
real gateway (in process, web API, SQLite, isolation as configured by the machine) answers
messages across 64 conversations. Also the latency the gateway adds beyond the runner
(sequential messages, p50/p99). Prints one table.

    .venv/bin/python bench/bench_turns.py [--messages 640] [--conversations 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pwd
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp

from bridge.app import GatewayApp
from bridge.config import load_settings
from bridge.plugins import load_specs
from bridge.runner.cli import shared_interpreter

INSTANT = """import json, sys
first = json.loads(sys.stdin.readline())
sys.stdout.write(json.dumps({"ok": True, "answer": "ok: " + first["prompt"][:40],
    "costUSD": 0, "costKnown": False, "tokenUsage": {"promptTokens": 1, "completionTokens": 1,
    "totalTokens": 2}, "toolCalls": [], "artifacts": []}) + "\\n")
"""
CONCURRENCY = 4


def free_uid_range() -> tuple[int, int]:
    for lo in range(78000, 79900, 100):
        try:
            for u in range(lo, lo + 100):
                pwd.getpwuid(u)
                break
        except KeyError:
            return lo, lo + 99
    raise SystemExit("no free uid range")


async def spawn_baseline(argv: list[str], n: int, user: int | None) -> tuple[float, list[float]]:
    sem = asyncio.Semaphore(CONCURRENCY)
    lat: list[float] = []
    frame = (json.dumps({"prompt": "hello"}) + "\n").encode()
    kw: dict[str, Any] = {"user": user, "group": user, "extra_groups": []} if user else {}

    async def one() -> None:
        async with sem:
            t0 = time.perf_counter()
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                **kw,
            )
            await proc.communicate(frame)
            lat.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return n / (time.perf_counter() - t0), lat


async def gateway_run(env: dict[str, str], n: int, convs: int, seq: int) -> dict[str, float]:
    specs = load_specs()
    settings = load_settings(
        None, adapter_sections={k: s.settings_model for k, s in specs.items()}, environ=env
    )
    app = GatewayApp(settings, specs)
    await app.initialize()
    await app.start()
    base = f"http://127.0.0.1:{app.port}"
    out: dict[str, float] = {}
    try:
        async with aiohttp.ClientSession() as s:

            async def post(thread: str, text: str) -> None:
                async with s.post(
                    f"{base}/api/threads/{thread}/messages", json={"user": "bench", "text": text}
                ) as r:
                    assert r.status == 202

            async def answers(thread: str) -> int:
                async with s.get(f"{base}/api/threads/{thread}/messages") as r:
                    data = await r.json()
                return sum(1 for m in data["messages"] if m["role"] == "assistant")

            async def wait_all(expected: dict[str, int], deadline: float) -> None:
                pending = dict(expected)
                while pending:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"timed out; waiting on {len(pending)} threads")
                    for t in list(pending):
                        if await answers(t) >= pending[t]:
                            del pending[t]
                    await asyncio.sleep(
                        0.05
                    )  # bounded polling (fast polling would load the server)

            threads = [f"c{i}" for i in range(convs)]
            t0 = time.perf_counter()
            await asyncio.gather(*(post(t, "warm up") for t in threads))
            await wait_all({t: 1 for t in threads}, time.monotonic() + 300)
            out["warmup_s"] = time.perf_counter() - t0
            per = n // convs
            t0 = time.perf_counter()
            await asyncio.gather(*(post(t, f"m{j}") for j in range(per) for t in threads))
            await wait_all({t: 1 + per for t in threads}, time.monotonic() + 600)
            out["rate"] = per * convs / (time.perf_counter() - t0)
            # sequential latency: POST until the answer is visible on the event stream
            lat: list[float] = []
            async with s.get(f"{base}/api/threads/seq/events") as stream:
                await stream.content.readline()
                for j in range(seq):
                    t0 = time.perf_counter()
                    await post("seq", f"s{j}")
                    async for raw in stream.content:
                        if raw.startswith(b"data: ") and b'"role": "assistant"' in raw:
                            break
                    lat.append(time.perf_counter() - t0)
            out["seq_p50"] = statistics.median(lat[5:])
            out["seq_p99"] = sorted(lat[5:])[int(len(lat[5:]) * 0.99) - 1]
    finally:
        await app.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=640)
    ap.add_argument("--conversations", type=int, default=64)
    ap.add_argument("--sequential", type=int, default=60)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-turns-"))
    os.chmod(tmp, 0o755)
    runner = tmp / "instant_runner.py"
    runner.write_text(INSTANT)
    os.chmod(runner, 0o755)
    argv = [shared_interpreter(), str(runner)]
    lo, hi = free_uid_range()
    user = None
    if os.geteuid() == 0:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--uid", str(hi), "jbbench"], check=True
        )
        user = hi
    env = {
        "JAZZ_BRIDGE_ROOT": str(tmp / "root"),
        "JAZZ_BRIDGE_SERVER__PORT": "0",
        "JAZZ_BRIDGE_RUNNER__COMMAND": json.dumps(argv),
        "JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS": str(CONCURRENCY),
        "JAZZ_BRIDGE_LIMITS__MAX_QUEUED_PER_CONVERSATION": "1000",
        "JAZZ_BRIDGE_PROGRESS__FIRST_AFTER_S": "30",
        "JAZZ_BRIDGE_ACCOUNTS__UID_MIN": str(lo),
        "JAZZ_BRIDGE_ACCOUNTS__UID_MAX": str(hi - 1),
        "JAZZ_BRIDGE_LOG__LEVEL": "WARNING",
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }
    try:
        spawn_rate, _ = asyncio.run(spawn_baseline(argv, args.messages, user))
        seq_spawn: list[float] = []
        for _ in range(args.sequential):
            seq_spawn.extend(asyncio.run(spawn_baseline(argv, 1, user))[1])
        spawn_p50 = statistics.median(seq_spawn[5:])
        gw = asyncio.run(gateway_run(env, args.messages, args.conversations, args.sequential))
    finally:
        if user:
            subprocess.run(["userdel", "jbbench"], check=False)
        try:
            accounts = json.loads((tmp / "root/state/accounts.json").read_text())["accounts"]
            for entry in accounts.values():
                subprocess.run(["userdel", entry["name"]], check=False, capture_output=True)
                subprocess.run(["groupdel", entry["name"]], check=False, capture_output=True)
        except (OSError, ValueError, KeyError):
            pass
        shutil.rmtree(tmp, ignore_errors=True)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows = [
        ("measure", "value", "ratio / note"),
        ("spawn baseline (limit), msgs/s", f"{spawn_rate:.1f}", f"concurrency {CONCURRENCY}"),
        (
            "gateway pipeline, msgs/s",
            f"{gw['rate']:.1f}",
            f"{gw['rate'] / spawn_rate:.2f} of the limit (aim >= 0.7)",
        ),
        ("warm-up (homes + accounts)", f"{gw['warmup_s']:.2f} s", f"{args.conversations} convs"),
        ("runner alone, sequential p50", f"{spawn_p50 * 1000:.1f} ms", ""),
        ("added latency p50", f"{(gw['seq_p50'] - spawn_p50) * 1000:.1f} ms", "aim < 15 ms"),
        ("added latency p99", f"{(gw['seq_p99'] - spawn_p50) * 1000:.1f} ms", ""),
        ("max RSS of this process", f"{rss_mb:.0f} MB", "gateway + client"),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for i, r in enumerate(rows):
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
        if i == 0:
            print("-+-".join("-" * w for w in widths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
