"""The intake benchmark's parts: the signed Slack events it sends, the servers it measures
(the gateway, a bare aiohttp handler, slack-bolt alone, the fake Slack Web API), the closed
and open load loops, and the profile and memory readings (bench_intake.py runs them)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import hmac
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import aiohttp  # noqa: E402
from bench_support import pct  # noqa: E402

TEAM, DM, USER = "T0TEAM0001", "D0BENCH0001", "U0USER0001"
SECRET = "0123456789abcdef0123456789abcdef"

BOT_TOKEN = "xoxb-0000000000-bench-token-for-the-fake"

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


def start_gateway(
    tmp: Path,
    port: int,
    api_url: str,
    runner: Path,
    root: str = "root",
    tree: Path | None = None,
) -> Server:
    """``jazz-bridge serve`` of this checkout, or of the checkout at ``tree`` (a baseline:
    its packages first on the path, run by this venv's Python; its files left unwritten)."""
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
        # the client is one peer carrying every platform's load: at 256 in flight the open
        # loop at 80% briefly has more under way than one real peer may (429)
        "JAZZ_BRIDGE_SERVER__MAX_REQUESTS_PER_PEER": "100000",
        "JAZZ_BRIDGE_SERVER__MAX_CONNECTIONS_PER_PEER": "0",
    }
    argv = [str(JAZZ_BRIDGE), "serve"]
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        argv = [sys.executable, "-c", "import sys; from bridge.entry import main; sys.exit(main())"]
        argv.append("serve")
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=tmp,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / f"gateway-{root}.stderr", "wb"),  # noqa: SIM115 (closed with it)
    )
    return Server(f"jazz-bridge serve ({root})", proc, f"http://127.0.0.1:{port}")


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


def cpu_s_of(pid: int) -> float:
    """CPU seconds ``pid`` has used, all its threads (/proc stat utime + stime): what a
    round cost it, which a loaded machine moves much less than the rate it reached."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()  # after the command name, from field 3 on
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # fields 14, 15


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
