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
import cProfile
import json
import logging
import os
import pstats
import resource
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from bench_support import (
    RUNNER_SRC,
    Client,
    Spawner,
    Throwaway,
    cpu_model,
    cpu_s,
    free_uid_block,
    pct,
    remove_gateway_accounts,
    spawner,
    table,
)

from bridge.app import GatewayApp
from bridge.config import load_settings
from bridge.plugins import load_specs
from bridge.runner.command import shared_interpreter


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
        # one bench "person" starts every conversation: the daily cap on new ones is a
        # person's, not the benchmark's (50 would refuse the rest and the bench time out)
        "JAZZ_BRIDGE_ACCOUNTS__NEW_PER_USER_PER_DAY": "0",
        "JAZZ_BRIDGE_ACCOUNTS__NEW_PER_TEAM_PER_DAY": "0",
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
