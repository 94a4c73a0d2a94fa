"""Scale: ``jazz-bridge serve`` starting on a root with 10,000 provisioned conversations.

Baseline: the same command starting on an empty root. Measured: time from exec to
``/readyz`` answering 200 (which includes the start-up repair, shallow: each home's own
owner and mode from one listing, the walk of its contents waits for the conversation's
first run; and the store's recovery scan), and the process's RSS once ready.
Conversations are provisioned in process through the gateway's own code: ``Homes.ensure``
makes each home (the files a conversation starts with, walked once, so with its repair
marker) and ``Store.accept`` + ``complete_message`` its store rows (a conversation, one
finished message). Homes are made WITHOUT Unix accounts
(``isolation = off``): 10,000 ``useradd`` plus as many ``userdel`` would take most of an
hour here and leave /etc/passwd churned; the table says so. Each start is measured
``--starts`` times (the best and the worst are shown); the web adapter is the only one on.

Removes its temp root at the end, also on failure or Ctrl-C. Prints one table.

    .venv/bin/python bench/bench_scale.py [--conversations 10000] [--starts 2]
"""

from __future__ import annotations

import argparse
import asyncio
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
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from bench_support import cpu_model, table  # noqa: E402

from bridge.app import provision  # noqa: E402
from bridge.config import load_settings  # noqa: E402
from bridge.model import Inbound, InboxState  # noqa: E402
from bridge.store.sqlite import SqliteStore  # noqa: E402
from provisioning import naming  # noqa: E402

JAZZ_BRIDGE = REPO / ".venv" / "bin" / "jazz-bridge"
AIM_RSS_MB, AIM_START_S = 200.0, 5.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env_for(root: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "JAZZ_BRIDGE_ROOT": str(root),
        "JAZZ_BRIDGE_ISOLATION": "off",
        "JAZZ_BRIDGE_RUNNER__COMMAND": json.dumps(
            [sys.executable, str(HERE / "instant_runner.py")]
        ),
    }


def populate(root: Path, count: int) -> float:
    """``count`` conversations: a home each and their store rows. Returns seconds taken."""
    settings = load_settings(None, environ=env_for(root))
    t0 = time.perf_counter()
    prov = provision(settings)

    async def rows() -> None:
        store = SqliteStore(prov.root.layout.database)
        await store.open()
        try:
            for i in range(count):
                key = f"web:scale-{i:05d}"
                prov.homes.ensure(key)
                record, _ = await store.accept(
                    Inbound("web", f"scale-{i}", key, "bench", f"hello {i}", target={}),
                    home=naming.home_name(key),
                    is_command=False,
                )
                await store.complete_message(record.id, InboxState.DONE, [])
        finally:
            await store.close()

    asyncio.run(rows())
    return time.perf_counter() - t0


def start_once(root: Path, log: Path, profile: Path | None = None) -> tuple[float, int, int]:
    """Seconds from exec to /readyz 200, and RSS / peak RSS (KiB) once ready."""
    port = free_port()
    env = {**env_for(root), "JAZZ_BRIDGE_SERVER__PORT": str(port)}
    with open(log, "ab") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [str(JAZZ_BRIDGE), "serve"], env=env, cwd=root.parent, stdout=err, stderr=err
        )
        spy = _py_spy(proc.pid, profile)
        try:
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"serve exited with {proc.returncode}; see {log}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
                        if r.status == 200:
                            break
                except (urllib.error.URLError, OSError):
                    pass
                if time.perf_counter() - t0 > 600:
                    raise SystemExit("serve not ready after 600 s")
                time.sleep(0.01)  # polling a condition with a bound
            elapsed = time.perf_counter() - t0
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                spy.wait(60)
            status = Path(f"/proc/{proc.pid}/status").read_text().splitlines()
            pairs = (line.partition(":") for line in status)
            mem = {k: int(v.split()[0]) for k, _, v in pairs if k in ("VmRSS", "VmHWM")}
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return elapsed, mem.get("VmRSS", 0), mem.get("VmHWM", 0)


def _py_spy(pid: int, out: Path | None) -> subprocess.Popen[bytes] | None:
    """py-spy sampling ``pid`` (all threads, idle too) until SIGINT, as collapsed stacks."""
    if out is None:
        return None
    spy = shutil.which("py-spy") or str(REPO / ".venv" / "bin" / "py-spy")
    argv = [spy, "record", "--pid", str(pid), "--format", "raw", "-o", str(out), "--threads"]
    return subprocess.Popen([*argv, "--idle"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conversations", type=int, default=10_000)
    ap.add_argument("--starts", type=int, default=2, help="starts measured per root")
    ap.add_argument("--profile", type=Path, help="py-spy the first start on the full root")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up on SIGTERM too
    load_start = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try:
        empty, full = tmp / "empty" / "root", tmp / "full" / "root"
        empty.parent.mkdir()
        full.parent.mkdir()
        log = tmp / "serve.log"
        base = [start_once(empty, log) for _ in range(args.starts)]
        made_s = populate(full, args.conversations)
        homes = sum(1 for _ in (full / "chats").iterdir())
        scaled = [
            start_once(full, log, args.profile if i == 0 else None) for i in range(args.starts)
        ]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load_end = os.getloadavg()

    def span(values: list[float], unit: str) -> str:
        return " / ".join(f"{v:.2f}" for v in values) + f" {unit}"

    b_s, s_s = [r[0] for r in base], [r[0] for r in scaled]
    b_rss, s_rss = [r[1] / 1024 for r in base], [r[1] / 1024 for r in scaled]
    s_peak = max(r[2] for r in scaled) / 1024
    rows = [
        ("measure", "1st / 2nd ... start", "ratio / note"),
        ("empty root: start to /readyz", span(b_s, "s"), f"baseline; {args.starts} starts"),
        ("empty root: RSS when ready", span(b_rss, "MB"), "baseline"),
        (
            f"{homes:,} conversations: start to /readyz",
            span(s_s, "s"),
            f"x{s_s[0] / min(b_s):.1f} (1st) / x{min(s_s) / min(b_s):.1f} (best) of the empty "
            f"root's best (aim < {AIM_START_S:.0f} s: "
            f"{'met' if max(s_s) < AIM_START_S else 'MISSED'}); includes the shallow start-up "
            "repair",
        ),
        (
            f"{homes:,} conversations: RSS when ready",
            span(s_rss, "MB"),
            f"x{min(s_rss) / min(b_rss):.2f} of the empty root; peak {s_peak:.0f} MB "
            f"(aim < {AIM_RSS_MB:.0f} MB: {'met' if s_peak < AIM_RSS_MB else 'MISSED'})",
        ),
        (
            "provisioning them (in process)",
            f"{made_s:.1f} s",
            f"{args.conversations / made_s:.0f} conversations/s: home + 2 store transactions "
            "each; WITHOUT Unix accounts (isolation = off)",
        ),
        (
            "machine",
            f"{os.cpu_count()} CPUs",
            f"{cpu_model()}; Python {platform.python_version()}; load average "
            f"{load_start[0]:.2f} at start, {load_end[0]:.2f} at end",
        ),
    ]
    print(table(rows))
    if args.profile is not None and args.profile.exists():
        from intake_support import top_frames

        print(f"\nfirst start, top functions incl. idle ({args.profile}):", file=sys.stderr)
        print(top_frames(args.profile), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
