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

Everything it made (temp dir, the conversation's account as root) is removed at the end,
also on failure or Ctrl-C. Prints one table.

    .venv/bin/python bench/bench_intake.py [--requests 4000] [--concurrency 32] [--load-s 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import hashlib
import hmac
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import aiohttp  # noqa: E402
from bench_pipeline import cpu_model, pct, remove_gateway_accounts, table  # noqa: E402

SECRET = "0123456789abcdef0123456789abcdef"
BOT_TOKEN = "xoxb-0000000000-bench-token-for-the-fake"
TEAM, DM, USER = "T0TEAM0001", "D0BENCH0001", "U0USER0001"
JAZZ_BRIDGE = REPO / ".venv" / "bin" / "jazz-bridge"
BARE = """
import sys
from aiohttp import web

async def ok(request):
    await request.read()
    return web.Response(status=200)

app = web.Application()
app.router.add_post("/slack/events", ok)
app.router.add_get("/readyz", lambda r: ok(r))
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


# bolt alone: the same framework path the gateway's Slack adapter takes (signature checked,
# bolt's middleware, a listener) with a listener that does nothing: no store, no runs.
BOLT_ALONE = """
import sys
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

port, secret, token, api = sys.argv[1:5]
bolt = AsyncApp(
    client=AsyncWebClient(token=token, base_url=api),
    signing_secret=secret,
    process_before_response=True,
)

@bolt.event("message")
async def on_message(body):
    return None

async def events(request):
    return await to_aiohttp_response(await bolt.async_dispatch(await to_bolt_request(request)))

async def ready(request):
    return web.Response(status=200)

app = web.Application()
app.router.add_post("/slack/events", events)
app.router.add_get("/readyz", ready)
web.run_app(app, host="127.0.0.1", port=int(port), access_log=None, print=None)
"""


# the fake Slack Web API in a process of its own: in the client's process, answering the
# gateway's chat.postMessage for every run behind the intake delayed the client's own
# requests, and that delay counted as the gateway's latency
FAKE_SLACK = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from fake_slack_api import FakeSlackApi

async def main():
    fake = FakeSlackApi(sys.argv[2])
    await fake.start()
    print(fake.port, flush=True)
    await asyncio.Event().wait()  # until SIGTERM

asyncio.run(main())
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bodies(n: int, start: int) -> list[tuple[bytes, dict[str, str]]]:
    """``n`` signed DM events, distinct event ids and ts (signed now: valid for 5 minutes)."""
    out = []
    ts = str(int(time.time()))
    for i in range(start, start + n):
        event = {
            "type": "message",
            "user": USER,
            "text": f"bench message {i}",
            "ts": f"1764670000.{i:06d}",
            "channel": DM,
            "channel_type": "im",
            "event_ts": f"1764670000.{i:06d}",
        }
        body = {
            "token": "bench",
            "team_id": TEAM,
            "api_app_id": "A0APP00001",
            "event": event,
            "type": "event_callback",
            "event_id": f"EvBench{i:08d}",
            "event_time": 1764670000,
        }
        raw = json.dumps(body).encode()
        digest = hmac.new(SECRET.encode(), b"v0:" + ts.encode() + b":" + raw, hashlib.sha256)
        headers = {
            "Content-Type": "application/json",
            "X-Slack-Request-Timestamp": ts,
            "X-Slack-Signature": "v0=" + digest.hexdigest(),
        }
        out.append((raw, headers))
    return out


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    url: str

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def wait_ready(session: aiohttp.ClientSession, server: Server, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise SystemExit(f"{server.name} exited with {server.proc.returncode}")
        try:
            async with session.get(server.url + "/readyz") as r:
                if r.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.05)  # polling a condition with a bound, not synchronisation
    raise SystemExit(f"{server.name} not ready after {timeout:.0f}s")


@contextlib.contextmanager
def client_gc_paused() -> Iterator[None]:
    """This client's own garbage collection held off while it times a server.

    Its pauses (tens of milliseconds with thousands of requests in flight) are the client's,
    yet counted as the server's latency: in the open loop every request due during a pause
    started late. Collected before, and again after.
    """
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def closed_loop(
    session: aiohttp.ClientSession, url: str, reqs: list[tuple[bytes, dict[str, str]]], conc: int
) -> dict[str, float]:
    """The most acknowledged per second: ``conc`` requests always in flight."""
    with client_gc_paused():
        return await _closed_loop(session, url, reqs, conc)


async def _closed_loop(
    session: aiohttp.ClientSession, url: str, reqs: list[tuple[bytes, dict[str, str]]], conc: int
) -> dict[str, float]:
    lat: list[float] = []
    it = iter(reqs)

    async def worker() -> None:
        for body, headers in it:
            t0 = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as r:
                await r.read()
                if r.status != 200:
                    raise SystemExit(f"{url}: {r.status} {await r.text()}")
            lat.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(conc)))
    elapsed = time.perf_counter() - t0
    return {"rate": len(reqs) / elapsed, "p50": pct(lat, 50), "p99": pct(lat, 99)}


async def open_loop(
    session: aiohttp.ClientSession, url: str, reqs: list[tuple[bytes, dict[str, str]]], rate: float
) -> dict[str, float]:
    """Requests started on a fixed schedule at ``rate``/s; latency from the scheduled moment.

    Each request's task is made when it is due (not all of them up front: thousands of
    tasks made at once held the client's loop for a while at the start).
    """
    lat: list[float] = []

    async def one(due: float, body: bytes, headers: dict[str, str]) -> None:
        async with session.post(url, data=body, headers=headers) as r:
            await r.read()
            if r.status != 200:
                raise SystemExit(f"{url}: {r.status}")
        lat.append(time.perf_counter() - due)

    lags: list[float] = []
    done = asyncio.Event()

    async def watch_own_loop() -> None:
        """How late this client's loop wakes (a late client reads as a slow server)."""
        while not done.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(0.01)  # the probe's interval
            lags.append(time.perf_counter() - t0 - 0.01)

    with client_gc_paused():
        watcher = asyncio.create_task(watch_own_loop())
        start = time.perf_counter() + 0.05
        tasks = []
        for i, (body, headers) in enumerate(reqs):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)  # the schedule itself
            tasks.append(asyncio.create_task(one(due, body, headers)))
        await asyncio.gather(*tasks)
        achieved = len(reqs) / (time.perf_counter() - start)
        done.set()
        await watcher
    return {
        "rate": achieved,
        "p50": pct(lat, 50),
        "p99": pct(lat, 99),
        "client_lag": max(lags, default=0.0),
    }


def start_fake_slack(tmp: Path) -> tuple[Server, str]:
    """The fake Slack Web API as its own process; the server and its API URL."""
    script = tmp / "fake_slack.py"
    script.write_text(FAKE_SLACK)
    where = str(REPO / "tests" / "adapters" / "slack")
    proc = subprocess.Popen(
        [sys.executable, str(script), where, BOT_TOKEN], cwd=tmp, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the port, or EOF if it died
    if not line.strip().isdigit():
        proc.kill()
        raise SystemExit(f"the fake Slack API did not start ({line!r})")
    url = f"http://127.0.0.1:{int(line)}"
    return Server("fake Slack API", proc, url), url + "/api/"


HELD_RUNNER = """#!/bin/sh
# Holds its run until the gateway stops it: every later event of the conversation queues
# behind it, so the gateway does intake and nothing else.
IFS= read -r _request
exec sleep 3600
"""


def start_gateway(tmp: Path, port: int, api_url: str, runner: Path, root: str = "root") -> Server:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "JAZZ_BRIDGE_ROOT": str(tmp / root),
        "JAZZ_BRIDGE_SERVER__PORT": str(port),
        "JAZZ_BRIDGE_RUNNER__COMMAND": json.dumps([str(runner)]),
        "JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS": "1",
        "JAZZ_BRIDGE_LIMITS__MAX_QUEUED_PER_CONVERSATION": "1000000",
        "JAZZ_BRIDGE_PROGRESS__FIRST_AFTER_S": "3600",
        "JAZZ_BRIDGE_SLACK__BOT_TOKEN": BOT_TOKEN,
        "JAZZ_BRIDGE_SLACK__SIGNING_SECRET": SECRET,
        "JAZZ_BRIDGE_SLACK__API_URL": api_url,
        "JAZZ_BRIDGE_SLACK__ALLOW_EVERYONE": "true",
        "JAZZ_BRIDGE_WEB__ENABLED": "false",
        "JAZZ_BRIDGE_LOG__FILE": str(tmp / "gateway.log"),
    }
    proc = subprocess.Popen(
        [str(JAZZ_BRIDGE), "serve"],
        env=env,
        cwd=tmp,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "gateway.stderr", "wb"),  # noqa: SIM115 (closed with the process)
    )
    return Server("jazz-bridge serve", proc, f"http://127.0.0.1:{port}")


def start_bare(tmp: Path, port: int) -> Server:
    script = tmp / "bare.py"
    script.write_text(BARE)
    proc = subprocess.Popen([sys.executable, str(script), str(port)], cwd=tmp)
    return Server("bare aiohttp", proc, f"http://127.0.0.1:{port}")


def start_bolt_alone(tmp: Path, port: int, api_url: str) -> Server:
    script = tmp / "bolt_alone.py"
    script.write_text(BOLT_ALONE)
    argv = [sys.executable, str(script), str(port), SECRET, BOT_TOKEN, api_url]
    proc = subprocess.Popen(argv, cwd=tmp)
    return Server("bolt alone", proc, f"http://127.0.0.1:{port}")


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
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=60)
    servers = {"bare": bare, "bolt": bolt, "gateway": gateway, "held": held}
    results: dict[str, list[dict[str, float]]] = {key: [] for key in servers}
    loads: dict[str, dict[str, float]] = {}
    n = args.requests
    next_id = 0
    sent = {"gateway": 0, "held": 0}

    def batch(count: int, server: Server) -> list[tuple[bytes, dict[str, str]]]:
        nonlocal next_id
        out = bodies(count, next_id)
        next_id += count
        for key in sent:
            sent[key] += count if server is servers[key] else 0
        return out

    async def at_80_percent(session: aiohttp.ClientSession, key: str) -> dict[str, float]:
        """Open loop at 80% of the mean of ``key``'s two closed-loop rounds."""
        top = sum(r["rate"] for r in results[key]) / len(results[key])
        count = int(top * 0.8 * args.load_s)
        url = servers[key].url + "/slack/events"
        load = await open_loop(session, url, batch(count, servers[key]), top * 0.8)
        return {**load, "target": top * 0.8}

    try:
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            await wait_ready(session, bare)
            await wait_ready(session, bolt)
            await wait_ready(session, gateway)
            await wait_ready(session, held)
            # Quiet first: the bare handler, bolt alone and the gateway whose run is held,
            # alternating; none of them does anything between requests. The gateway with
            # runs behind its intake goes on running them long after its own rounds (every
            # event is a run), so it comes last, alone: measured between the others, its
            # runs took CPU from their rounds (the baseline's included).
            quiet = ("bare", "bolt", "held")
            for key in quiet:  # warm-up: connections, bolt's auth.test, the account
                server = servers[key]
                await closed_loop(
                    session, server.url + "/slack/events", batch(300, server), args.concurrency
                )
            profiler = py_spy(held.proc.pid, args.profile)
            for _ in range(2):
                for key in quiet:
                    url = servers[key].url + "/slack/events"
                    reqs = batch(n, servers[key])
                    results[key].append(await closed_loop(session, url, reqs, args.concurrency))
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                profiler.wait(60)
            loads["held"] = await at_80_percent(session, "held")
            url = gateway.url + "/slack/events"
            await closed_loop(session, url, batch(300, gateway), args.concurrency)
            for _ in range(2):
                results["gateway"].append(
                    await closed_loop(session, url, batch(n, gateway), args.concurrency)
                )
            loads["gateway"] = await at_80_percent(session, "gateway")
            rss = {key: _rss_kb(servers[key].proc.pid) for key in sent}
    finally:
        for server in servers.values():
            server.stop()
        fake.stop()
    stored = {"gateway": _stored(tmp / "root"), "held": _stored(tmp / "root-held")}

    def mean(key: str, field: str) -> float:
        return sum(r[field] for r in results[key]) / len(results[key])

    bare_rate, bolt_rate = mean("bare", "rate"), mean("bolt", "rate")
    rows = [
        ("measure", "value", "ratio / note"),
        (
            "bare aiohttp handler (baseline), acks/s",
            f"{bare_rate:.0f}",
            " / ".join(f"{r['rate']:.0f}" for r in results["bare"]) + " (two rounds)",
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
    for key, title in (
        ("held", "gateway /slack/events, intake alone (its run held)"),
        ("gateway", "gateway /slack/events, runs behind the intake"),
    ):
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
    return rows


def py_spy(pid: int, out: Path | None) -> subprocess.Popen[bytes] | None:
    """py-spy sampling the gateway until SIGINT, as collapsed stacks: only the thread holding
    the GIL (what costs CPU in Python; idle threads waiting on a queue are left out)."""
    if out is None:
        return None
    spy = shutil.which("py-spy") or str(REPO / ".venv" / "bin" / "py-spy")
    argv = [
        spy,
        "record",
        "--pid",
        str(pid),
        "--format",
        "raw",
        "-o",
        str(out),
        "--gil",
        "--rate",
        "500",
    ]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def top_frames(raw: Path, n: int = 20) -> str:
    """The functions the samples were in (self time), from py-spy's collapsed stacks."""
    counts: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        leaf = stack.split(";")[-1]
        counts[leaf] = counts.get(leaf, 0) + int(count)
        total += int(count)
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:n]
    return "\n".join(f"{c / max(total, 1):6.1%}  {f}" for f, c in top)


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _stored(root: Path) -> int:
    import sqlite3

    db = root / "state" / "bridge.db"
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return int(conn.execute("SELECT count(*) FROM inbox").fetchone()[0])
    except sqlite3.Error as exc:
        raise SystemExit(f"cannot read {db}: {exc}") from exc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=4000, help="requests per timed round")
    ap.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    ap.add_argument("--load-s", type=float, default=5.0, help="seconds at 80%% load")
    ap.add_argument("--profile", type=Path, help="py-spy the gateway's timed rounds to FILE")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up on SIGTERM too
    load_start = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="bench-intake-"))
    os.chmod(tmp, 0o755)  # the conversation's account runs the runner from here
    try:
        rows = asyncio.run(run(args, tmp))
    finally:
        removed = sum(remove_gateway_accounts(tmp / r) for r in ("root", "root-held"))
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
