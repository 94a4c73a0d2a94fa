"""Signed Slack events acknowledged per second at ``/slack/events``, against a bare handler.

Baseline: a bare aiohttp server (its own process) whose only route reads the body and
answers 200. Measured: ``jazz-bridge serve`` (its own process) with the Slack adapter in
HTTP mode against the fake Slack Web API (its own process), every event's signature and
shape checked, converted and persisted in SQLite before its 200 (message events no longer
pass through bolt's dispatch, see ``adapters/slack/routes.py``); the runner is
``bench/instant_runner.sh``, one run at a time, all events in one DM conversation whose
queue is unbounded for the run (the gateway has no "runs off" switch: runs happen behind
the intake, as they would).
Also measured, for scale: bolt alone (its own process): slack-bolt's ``AsyncApp`` on aiohttp
with a listener that does nothing: what the gateway's intake cost while every event went
through bolt, and what it still costs a button press or a slash command.

All three servers get the same client: aiohttp, keep-alive, ``--concurrency`` requests in
flight, the same pre-signed bodies (a DM ``message`` event each, distinct ``event_id``).
First the most each acknowledges per second (closed loop) with p50/p99 ack latency; then
the gateway at 80% of its own maximum (open loop: requests start on a fixed schedule and
latency counts from the scheduled moment) for its p99. The bare handler, bolt alone and
the gateway with its run held are measured twice, alternating, with nothing else running;
the gateway with runs behind its intake is measured last, on its own, since its runs go on
for a long while after its rounds and would take CPU from any round measured meanwhile.
Every ratio is of the means, against the bare handler's quiet rounds.

``--baseline DIR``: also a held gateway of another checkout (e.g. a detached worktree of
the commit before a change), run by this venv's Python, measured in the same quiet
rotation: before and after under the same load, which a busy machine moves a lot.

Everything it made (temp dir, the conversation's account as root) is removed at the end,
also on failure or Ctrl-C. Prints one table.

    .venv/bin/python bench/bench_intake.py [--requests 4000] [--concurrency 32] [--load-s 5]
        [--rounds 2] [--baseline DIR] [--profile FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import signal
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import aiohttp  # noqa: E402
from bench_support import cpu_model, remove_gateway_accounts, table  # noqa: E402
from intake_support import (  # noqa: E402
    Server,
    _rss_kb,
    _stored,
    bodies,
    closed_loop,
    cpu_s_of,
    free_port,
    open_loop,
    py_spy,
    start_bare,
    start_bolt_alone,
    start_fake_slack,
    start_gateway,
    top_frames,
    wait_ready,
)

HELD_RUNNER = """#!/bin/sh
# Holds its run until the gateway stops it: every later event of the conversation queues
# behind it, so the gateway does intake and nothing else.
IFS= read -r _request
exec sleep 3600
"""


async def run(args: argparse.Namespace, tmp: Path) -> list[tuple[str, str, str]]:
    fake, api_url = start_fake_slack(tmp)
    # a shell, not the Python runner: its ~25 ms of CPU per run, behind the intake, took
    # most of a core from the gateway being measured
    runner = tmp / "instant_runner.sh"
    shutil.copyfile(HERE / "instant_runner.sh", runner)
    os.chmod(runner, 0o755)
    held_runner = tmp / "held_runner.sh"
    held_runner.write_text(HELD_RUNNER)
    os.chmod(held_runner, 0o755)
    bare = start_bare(tmp, free_port())
    bolt = start_bolt_alone(tmp, free_port(), api_url)
    gateway = start_gateway(tmp, free_port(), api_url, runner)
    held = start_gateway(tmp, free_port(), api_url, held_runner, "root-held")
    servers = {"bare": bare, "bolt": bolt, "gateway": gateway, "held": held}
    if args.baseline is not None:
        servers["baseline"] = start_gateway(
            tmp, free_port(), api_url, held_runner, "root-baseline", args.baseline
        )
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=60)
    results: dict[str, list[dict[str, float]]] = {key: [] for key in servers}
    loads: dict[str, dict[str, float]] = {}
    n = args.requests
    next_id = 0
    sent = {key: 0 for key in ("gateway", "held", "baseline") if key in servers}

    def batch(count: int, server: Server) -> list[tuple[bytes, dict[str, str]]]:
        nonlocal next_id
        out = bodies(count, next_id)
        next_id += count
        for key in sent:
            sent[key] += count if server is servers[key] else 0
        return out

    async def timed_round(session: aiohttp.ClientSession, key: str) -> dict[str, float]:
        """One closed-loop round of ``n`` requests, with the server's CPU per request."""
        server = servers[key]
        reqs = batch(n, server)
        before = cpu_s_of(server.proc.pid)
        result = await closed_loop(session, server.url + "/slack/events", reqs, args.concurrency)
        return {**result, "cpu_per_ack": (cpu_s_of(server.proc.pid) - before) / n}

    async def at_80_percent(session: aiohttp.ClientSession, key: str) -> dict[str, float]:
        """Open loop at 80% of the mean of ``key``'s two closed-loop rounds."""
        top = sum(r["rate"] for r in results[key]) / len(results[key])
        count = int(top * 0.8 * args.load_s)
        url = servers[key].url + "/slack/events"
        load = await open_loop(session, url, batch(count, servers[key]), top * 0.8)
        return {**load, "target": top * 0.8}

    try:
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            for server in servers.values():
                await wait_ready(session, server)
            # Quiet first: the bare handler, bolt alone and the gateway whose run is held,
            # alternating; none of them does anything between requests. The gateway with
            # runs behind its intake goes on running them long after its own rounds (every
            # event is a run), so it comes last, alone: measured between the others, its
            # runs took CPU from their rounds (the baseline's included).
            quiet = ("bare", "bolt", "held", "baseline")[: 4 if "baseline" in servers else 3]
            for key in quiet:  # warm-up: connections, bolt's auth.test, the account
                server = servers[key]
                await closed_loop(
                    session, server.url + "/slack/events", batch(300, server), args.concurrency
                )
            profiler = py_spy(held.proc.pid, args.profile)
            for _ in range(args.rounds):
                for key in quiet:
                    results[key].append(await timed_round(session, key))
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                profiler.wait(60)
            loads["held"] = await at_80_percent(session, "held")
            if "baseline" in servers:
                loads["baseline"] = await at_80_percent(session, "baseline")
            url = gateway.url + "/slack/events"
            await closed_loop(session, url, batch(300, gateway), args.concurrency)
            for _ in range(args.rounds):
                results["gateway"].append(await timed_round(session, "gateway"))
            loads["gateway"] = await at_80_percent(session, "gateway")
            rss = {key: _rss_kb(servers[key].proc.pid) for key in sent}
    finally:
        for server in servers.values():
            server.stop()
        fake.stop()
    stored = {key: _stored(tmp / ("root" if key == "gateway" else f"root-{key}")) for key in sent}

    def mean(key: str, field: str) -> float:
        return sum(r[field] for r in results[key]) / len(results[key])

    bare_rate, bolt_rate = mean("bare", "rate"), mean("bolt", "rate")
    rows = [
        ("measure", "value", "ratio / note"),
        (
            "bare aiohttp handler (baseline), acks/s",
            f"{bare_rate:.0f}",
            " / ".join(f"{r['rate']:.0f}" for r in results["bare"]) + " (its rounds)",
        ),
        (
            "  bare: ack latency p50 / p99",
            f"{mean('bare', 'p50') * 1000:.1f} / {mean('bare', 'p99') * 1000:.1f} ms",
            f"{args.concurrency} in flight",
        ),
        (
            "bolt alone (signed, no-op listener, no store), acks/s",
            f"{bolt_rate:.0f}",
            f"x{bolt_rate / bare_rate:.2f} of the bare handler: the framework's own share; rounds "
            + " / ".join(f"{r['rate']:.0f}" for r in results["bolt"]),
        ),
    ]
    measured = [
        ("held", "gateway /slack/events, intake alone (its run held)"),
        ("gateway", "gateway /slack/events, runs behind the intake"),
    ]
    if "baseline" in servers:
        measured.insert(1, ("baseline", f"baseline {args.baseline}, intake alone (run held)"))
    for key, title in measured:
        rate = mean(key, "rate")
        ratio = rate / bare_rate
        load = loads[key]
        rows += [
            (
                f"{title}, acks/s",
                f"{rate:.0f}",
                f"x{ratio:.2f} of the bare handler (aim >= 0.5: "
                f"{'met' if ratio >= 0.5 else 'MISSED'}); x{rate / bolt_rate:.2f} of bolt alone; "
                "rounds " + " / ".join(f"{r['rate']:.0f}" for r in results[key]),
            ),
            (
                "  its CPU per ack (all threads)",
                f"{mean(key, 'cpu_per_ack') * 1e6:.0f} us",
                "rounds "
                + " / ".join(f"{r['cpu_per_ack'] * 1e6:.0f}" for r in results[key])
                + f" us; the bare handler {mean('bare', 'cpu_per_ack') * 1e6:.0f} us",
            ),
            (
                "  ack latency p50 / p99 at its max",
                f"{mean(key, 'p50') * 1000:.1f} / {mean(key, 'p99') * 1000:.1f} ms",
                f"{args.concurrency} in flight (closed loop: latency = concurrency / rate)",
            ),
            (
                "  at 80% of its max: p50 / p99",
                f"{load['p50'] * 1000:.1f} / {load['p99'] * 1000:.1f} ms",
                f"open loop {load['target']:.0f}/s scheduled, {load['rate']:.0f}/s done, "
                f"{args.load_s:.0f} s (aim p99 < 100 ms: "
                f"{'met' if load['p99'] < 0.1 else 'MISSED'}); the client's own loop was at "
                f"most {load['client_lag'] * 1000:.0f} ms late",
            ),
            (
                "  events stored in its inbox",
                f"{stored[key]}",
                f"of {sent[key]} acknowledged (each persisted before its 200); "
                f"gateway RSS {rss[key] / 1024:.0f} MB",
            ),
        ]
    if "baseline" in servers:
        after, before = mean("held", "rate"), mean("baseline", "rate")
        rows.append(
            (
                "intake alone: this tree / the baseline",
                f"x{after / before:.2f}",
                f"{after:.0f} vs {before:.0f} acks/s, rounds interleaved; CPU per ack "
                f"{mean('held', 'cpu_per_ack') * 1e6:.0f} vs "
                f"{mean('baseline', 'cpu_per_ack') * 1e6:.0f} us; p99 at 80% "
                f"{loads['held']['p99'] * 1000:.1f} vs {loads['baseline']['p99'] * 1000:.1f} ms",
            )
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=4000, help="requests per timed round")
    ap.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    ap.add_argument("--load-s", type=float, default=5.0, help="seconds at 80%% load")
    ap.add_argument("--profile", type=Path, help="py-spy the gateway's timed rounds to FILE")
    ap.add_argument("--rounds", type=int, default=2, help="closed-loop rounds per server")
    ap.add_argument(
        "--baseline",
        type=Path,
        help="also measure a held gateway of the checkout at DIR, interleaved (same run)",
    )
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up on SIGTERM too
    load_start = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="bench-intake-"))
    os.chmod(tmp, 0o755)  # the conversation's account runs the runner from here
    try:
        rows = asyncio.run(run(args, tmp))
    finally:
        roots = ("root", "root-held", "root-baseline")
        removed = sum(remove_gateway_accounts(tmp / r) for r in roots if (tmp / r).exists())
        shutil.rmtree(tmp, ignore_errors=True)
    load_end = os.getloadavg()
    rows.append(
        (
            "machine",
            f"{os.cpu_count()} CPUs",
            f"{cpu_model()}; Python {platform.python_version()}; load average "
            f"{load_start[0]:.2f} at start, {load_end[0]:.2f} at end; "
            f"{'root' if os.geteuid() == 0 else 'not root'}, {removed} account(s) removed",
        )
    )
    print(table(rows))
    if args.profile is not None and args.profile.exists():
        print(f"\ngateway self time, top functions ({args.profile}):", file=sys.stderr)
        print(top_frames(args.profile), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
