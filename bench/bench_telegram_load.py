"""Telegram load: ``jazz-bridge serve`` polling a local fake Bot API, 200 messages, 20 chats.

The gateway is a real ``jazz-bridge serve`` process in polling mode; the fake Bot API
(``tests/adapters/telegram/fake_bot_api.py``, in this process) releases 200 private-chat
messages over 20 chats either all at once (burst) or each one after the previous answer
arrived (seq). The runner is ``bench/instant_runner.sh`` (``--runner python``:
``bench/instant_runner.py``, whose interpreter start-up alone is ~25 ms), spawned per run, as the
conversation's own account when root). ``telegram.min_send_interval_s`` (about one
message a second per chat, Telegram's advice) is set to 0 here, and
``limits.max_queued_per_conversation`` to 20 so a burst of 10 per chat all queue.

Timed per message: from the fake handing the update out in a ``getUpdates`` answer to the
answer's ``sendMessage`` reaching it. One warm-up message per chat first (accounts and
homes are made there, reported apart). Also: Bot API calls per message (every method the
gateway called during the timed phase), the gateway's RSS, and every update persisted
before the offset moved (the gateway's contract; checked here: each timed update is in its
inbox). The TypeScript figures are the issue's reference (measured elsewhere, without
persisting anything), not measured here.

Removes what it made (temp dir, the conversations' accounts), also on failure or Ctrl-C.

    .venv/bin/python bench/bench_telegram_load.py [--messages 200] [--chats 20]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "adapters" / "telegram"))

import aiohttp  # noqa: E402
from bench_support import (  # noqa: E402
    Throwaway,
    cpu_model,
    free_uid_block,
    pct,
    remove_gateway_accounts,
    spawner,
    table,
)
from fake_bot_api import FakeBotApi  # noqa: E402
from intake_support import py_spy, top_frames  # noqa: E402

from bridge.runner.command import shared_interpreter  # noqa: E402

TOKEN = "999999999:AAbench-token_for-the-fake"
JAZZ_BRIDGE = REPO / ".venv" / "bin" / "jazz-bridge"
FIRST_CHAT = 500_000_001
SEQ_AIM, BURST_AIM = 0.35, 0.8  # msgs/s against the floor measured in the same round
CPU_AIM_MS = 2.5  # the gateway's own CPU per message
ROOTS = itertools.count(1)  # each gateway started gets a root of its own
RUN_LIMIT = 4  # limits.max_concurrent_runs, the gateway's default (not changed here)


class TimedBotApi(FakeBotApi):
    """The fake Bot API, noting when each update was first handed out."""

    def __init__(self, token: str) -> None:
        super().__init__(token)
        self.handed: dict[int, float] = {}
        self.answered: dict[int, list[float]] = {}  # chat -> when each answer arrived
        self._an_answer = asyncio.Event()

    def _m_sendMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        result = super()._m_sendMessage(params)
        if str(params.get("text", "")).startswith("ok: "):
            chat = int(params["chat_id"])
            self.answered.setdefault(chat, []).append(time.monotonic())
            self._an_answer.set()
        return result

    def answers(self, chat: int) -> int:
        return len(self.answered.get(chat, ()))

    async def until(
        self, pred: Any, timeout: float, what: str, proc: subprocess.Popen[bytes]
    ) -> None:
        """Wait, woken by each answer (no polling), until ``pred()`` holds; bounded."""
        deadline = time.monotonic() + timeout
        while not pred():
            if proc.poll() is not None:
                raise SystemExit(f"the gateway exited ({proc.returncode}) waiting for {what}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")
            self._an_answer.clear()
            try:
                await asyncio.wait_for(self._an_answer.wait(), timeout=min(left, 1.0))
            except TimeoutError:
                pass  # re-check the gateway and the deadline

    async def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]] | None:
        result = await super()._get_updates(params)
        now = time.monotonic()
        for update in result or []:
            self.handed.setdefault(int(update["update_id"]), now)
        return result


def update(update_id: int, chat: int, text: str) -> dict[str, Any]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "from": {"id": chat, "is_bot": False, "first_name": "Bench"},
            "chat": {"id": chat, "type": "private", "first_name": "Bench"},
            "date": int(time.time()),
            "text": text,
        },
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_cpu_s(pid: int) -> tuple[float, float, float]:
    """CPU seconds of ``pid`` itself, of its children it has waited for, and the kernel's
    share of the first (system time: forks, pipes, sockets, fsyncs, cgroups) (/proc stat)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()  # after the command name, from field 3 on
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])  # fields 14-17
    tick = os.sysconf("SC_CLK_TCK")
    return (utime + stime) / tick, (cutime + cstime) / tick, stime / tick


def rss_kb(pid: int) -> tuple[int, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields.get("VmRSS", 0), fields.get("VmHWM", 0)


def gateway_argv(tree: Path | None) -> list[str]:
    """``jazz-bridge serve`` from this checkout, or from ``tree`` (another checkout, e.g. a
    git worktree of the commit before a change) with this checkout's virtualenv."""
    if tree is None:
        return [str(JAZZ_BRIDGE), "serve"]
    code = (
        f"import sys; sys.path.insert(0, {str(tree)!r}); "
        "from bridge.entry import main; sys.exit(main())"
    )
    return [str(REPO / ".venv" / "bin" / "python"), "-c", code, "serve"]


async def one_mode(
    mode: str,
    args: argparse.Namespace,
    tmp: Path,
    runner_argv: list[str],
    tree: Path | None = None,
) -> dict[str, Any]:
    fake = TimedBotApi(TOKEN)
    await fake.start()
    root = tmp / f"root-{mode}-{next(ROOTS)}"
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "JAZZ_BRIDGE_ROOT": str(root),
        "JAZZ_BRIDGE_SERVER__PORT": str(port),
        "JAZZ_BRIDGE_RUNNER__COMMAND": json.dumps(runner_argv),
        "JAZZ_BRIDGE_LIMITS__MAX_QUEUED_PER_CONVERSATION": "20",
        "JAZZ_BRIDGE_PROGRESS__FIRST_AFTER_S": "3600",
        "JAZZ_BRIDGE_TELEGRAM__TOKEN": TOKEN,
        "JAZZ_BRIDGE_TELEGRAM__API_URL": fake.api_url,
        "JAZZ_BRIDGE_TELEGRAM__MODE": "polling",
        "JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE": "true",
        "JAZZ_BRIDGE_TELEGRAM__MIN_SEND_INTERVAL_S": "0",
        "JAZZ_BRIDGE_WEB__ENABLED": "false",
        "JAZZ_BRIDGE_LOG__FILE": str(tmp / f"gateway-{mode}.log"),
        "JAZZ_BRIDGE_ISOLATION": args.isolation,
    }
    for setting in args.set:
        key, _, value = setting.partition("=")
        env[f"JAZZ_BRIDGE_{key.upper().replace('.', '__')}"] = value
    stderr = open(tmp / f"gateway-{mode}.stderr", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        gateway_argv(tree), env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=stderr
    )
    out: dict[str, Any] = {"mode": mode}
    chats = [FIRST_CHAT + i for i in range(args.chats)]
    try:
        async with aiohttp.ClientSession() as session:

            async def ready() -> bool:
                try:
                    async with session.get(f"http://127.0.0.1:{port}/readyz") as r:
                        return r.status == 200
                except aiohttp.ClientError:
                    return False

            deadline = time.monotonic() + 60
            while not await ready():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the gateway did not start (see {stderr.name})")
                await asyncio.sleep(0.05)

        # warm-up: one message per chat (the account and home of each are made here)
        next_id = 1
        t0 = time.perf_counter()
        for chat in chats:
            fake.queue_update(update(next_id, chat, f"warm up {chat}"))
            next_id += 1
        await fake.until(
            lambda: all(fake.answers(c) >= 1 for c in chats), 300, "warm-up answers", proc
        )
        out["warmup_s"] = time.perf_counter() - t0

        calls_before = len(fake.calls)
        per_chat = args.messages // args.chats
        profile = args.profile.with_suffix(f".{mode}") if args.profile else None
        profiler = py_spy(proc.pid, profile)
        tracer = fsync_counter(proc.pid, tmp / f"fsyncs-{mode}.txt") if args.strace else None
        store0 = await store_counts(port)
        timed: list[tuple[int, int, int]] = []  # (update id, chat, k-th answer of that chat)
        gw0, kids0, sys0 = proc_cpu_s(proc.pid)
        bench0 = time.process_time()
        t0 = time.perf_counter()
        if mode == "burst":
            for k in range(per_chat):
                for chat in chats:
                    timed.append((next_id, chat, 2 + k))
                    fake.queue_update(update(next_id, chat, f"m{next_id}"))
                    next_id += 1
            await fake.until(
                lambda: all(fake.answers(c) >= 1 + per_chat for c in chats),
                300,
                "every burst answer",
                proc,
            )
        else:
            for k in range(per_chat):
                for chat in chats:
                    timed.append((next_id, chat, 2 + k))
                    fake.queue_update(update(next_id, chat, f"m{next_id}"))
                    next_id += 1
                    want = 2 + k
                    await fake.until(
                        lambda c=chat, w=want: fake.answers(c) >= w, 60, "the answer", proc
                    )
        elapsed = time.perf_counter() - t0
        gw1, kids1, sys1 = proc_cpu_s(proc.pid)
        store1 = await store_counts(port)
        if tracer is not None:
            tracer.send_signal(signal.SIGINT)  # strace prints its counts on detaching
            tracer.wait(60)
            out["fsyncs"] = fsyncs_counted(tmp / f"fsyncs-{mode}.txt")
        bench_cpu = time.process_time() - bench0
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            profiler.wait(60)
            out["profile"] = profile
        lat = []
        for update_id, chat, nth in timed:
            lat.append(fake.answered[chat][nth - 1] - fake.handed[update_id])
        methods: dict[str, int] = {}
        for call in fake.calls[calls_before:]:
            methods[call.method] = methods.get(call.method, 0) + 1
        total = len(timed)
        out.update(
            total=total,
            rate=total / elapsed,
            p50=pct(lat, 50),
            p95=pct(lat, 95),
            calls=sum(methods.values()) / total,
            methods={m: n / total for m, n in sorted(methods.items())},
            rss=rss_kb(proc.pid),
            gw_cpu_ms=(gw1 - gw0) / total * 1000,
            kids_cpu_ms=(kids1 - kids0) / total * 1000,
            gw_sys_ms=(sys1 - sys0) / total * 1000,
            bench_cpu_ms=bench_cpu / total * 1000,
            commits=(store1[0] - store0[0]) / total,
            writes=(store1[1] - store0[1]) / total,
        )
        if "fsyncs" in out:
            out["fsyncs"] /= total
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        stderr.close()
        await fake.stop()
    db = root / "state" / "bridge.db"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        stored = {
            int(r[0].split(":")[1])
            for r in conn.execute("SELECT event_id FROM inbox WHERE platform = 'telegram'")
        }
    out["persisted"] = sum(1 for u, _c, _n in timed if u in stored)
    out["accounts_removed"] = remove_gateway_accounts(root)
    return out


async def store_counts(port: int) -> tuple[float, float]:
    """The gateway's store commits and writes so far (its /metrics)."""
    url = f"http://127.0.0.1:{port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as r:
        text = await r.text()
    found = {"jazz_bridge_store_commits_total": 0.0, "jazz_bridge_store_writes_total": 0.0}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in found:
            found[name] = float(value)
    return found["jazz_bridge_store_commits_total"], found["jazz_bridge_store_writes_total"]


def fsync_counter(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """strace counting the gateway's fsync and fdatasync calls (all threads) into ``out``.
    Attached strace stops the gateway at every system call: rates measured with it are
    not the gateway's."""
    argv = ["strace", "-f", "-qq", "-c", "-e", "trace=fsync,fdatasync", "-o", str(out)]
    return subprocess.Popen([*argv, "-p", str(pid)], stderr=subprocess.DEVNULL)


def fsyncs_counted(path: Path) -> float:
    total = 0.0
    for line in path.read_text().splitlines() if path.exists() else []:
        fields = line.split()
        if fields and fields[-1] in ("fsync", "fdatasync"):
            total += float(fields[3])  # % time, seconds, usecs/call, calls, [errors,] syscall
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=200)
    ap.add_argument("--chats", type=int, default=20)
    ap.add_argument(
        "--runner",
        choices=["sh", "python"],
        default="sh",
        help="instant runner: bench/instant_runner.sh (default) or the Python one (~25 ms start)",
    )
    ap.add_argument("--modes", nargs="+", default=["seq", "burst"], choices=["seq", "burst"])
    ap.add_argument("--profile", type=Path, help="py-spy the gateway's timed phase to FILE.<mode>")
    ap.add_argument(
        "--isolation",
        choices=["auto", "off"],
        default="auto",
        help="the gateway's isolation setting (auto: one account per chat when root)",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more setting for the gateway, e.g. limits.run_cgroup=false (repeatable)",
    )
    ap.add_argument(
        "--strace",
        action="store_true",
        help="also count the gateway's fsyncs (strace attached: its rates are then not the "
        "gateway's own)",
    )
    ap.add_argument(
        "--baseline",
        type=Path,
        help="another checkout (e.g. `git worktree add /tmp/before HEAD~1`): its gateway runs "
        "in the same rounds, interleaved, and the table says after / before",
    )
    ap.add_argument("--rounds", type=int, default=1, help="rounds of every mode (medians)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up on SIGTERM too
    load_start = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="bench-telegram-"))
    os.chmod(tmp, 0o755)  # conversation accounts run the runner from here
    for name in ("instant_runner.py", "instant_runner.sh"):
        shutil.copyfile(HERE / name, tmp / name)
        os.chmod(tmp / name, 0o755)
    results = []
    floors: dict[str, list[dict[str, float]]] = {}
    account: Throwaway | None = None
    try:
        isolated = os.geteuid() == 0 and args.isolation == "auto"
        if isolated:
            account = Throwaway(f"jbtgload{os.getpid() % 100_000}", free_uid_block()[1], tmp / "h")
            account.create()
        runner_argv = (
            [str(tmp / "instant_runner.sh")]
            if args.runner == "sh"
            else [shared_interpreter(), str(tmp / "instant_runner.py")]
        )
        floor = spawner(runner_argv, account, tmp)
        trees: list[Path | None] = [None] if args.baseline is None else [args.baseline, None]
        for _round in range(args.rounds):
            for mode in args.modes:
                # the floor: the same runner spawned alone, as the gateway spawns it (one at
                # a time for seq; at the gateway's run limit for burst), no gateway, no store
                level = 1 if mode == "seq" else RUN_LIMIT
                floors.setdefault(mode, []).append(asyncio.run(floor.rate(args.messages, level)))
                for tree in trees:
                    r = asyncio.run(one_mode(mode, args, tmp, runner_argv, tree))
                    r["tree"] = tree
                    results.append(r)
    finally:
        if account is not None:
            account.remove()
        for root in tmp.glob("root-*"):
            remove_gateway_accounts(root)
        shutil.rmtree(tmp, ignore_errors=True)
    load_end = os.getloadavg()
    rows = [("measure", "value", "ratio / note")]
    aims = {"seq": SEQ_AIM, "burst": BURST_AIM}
    med = statistics.median
    for mode in args.modes:
        fl = floors[mode]
        floor_rate = med(f["rate"] for f in fl)
        rows.append(
            (
                f"{mode}: runner spawned alone (the floor), runs/s",
                f"{floor_rate:.1f}",
                f"{'one at a time' if mode == 'seq' else f'{RUN_LIMIT} at a time'}, as "
                f"{'a throwaway account' if account is not None else 'this account'}; "
                f"CPU per run: spawner {med(f['cpu_ms'] for f in fl):.1f} ms, runner "
                f"{med(f['kids_ms'] for f in fl):.1f} ms; median of {len(fl)}",
            )
        )
        by_tree: dict[str, dict[str, float]] = {}
        for tree in trees:
            name = "before" if tree is not None else ("after" if args.baseline else "gateway")
            rs = [r for r in results if r["mode"] == mode and r["tree"] == tree]
            # each round's rate against that round's floor, then the median
            ratio = med(r["rate"] / f["rate"] for r, f in zip(rs, fl, strict=True))
            fig = {
                k: med(r[k] for r in rs) for k in ("rate", "gw_cpu_ms", "kids_cpu_ms", "gw_sys_ms")
            }
            by_tree[name] = fig
            where = f" ({tree})" if tree is not None else ""
            rows.append(
                (
                    f"{mode}, {name}{where}: msgs/s",
                    f"{fig['rate']:.1f}",
                    f"x{ratio:.2f} of the floor (aim x{aims[mode]}: "
                    f"{'met' if ratio >= aims[mode] else 'MISSED'}); median of {len(rs)} rounds",
                )
            )
            rows.append(
                (
                    f"  {name}: update handed out -> answer's sendMessage, p50 / p95",
                    f"{med(r['p50'] for r in rs) * 1000:.1f} / "
                    f"{med(r['p95'] for r in rs) * 1000:.1f} ms",
                    f"{rs[0]['total']} msgs over {args.chats} private chats",
                )
            )
            rows.append(
                (
                    f"  {name}: CPU per message: gateway (its kernel share) / its runs",
                    f"{fig['gw_cpu_ms']:.1f} ({fig['gw_sys_ms']:.1f}) / "
                    f"{fig['kids_cpu_ms']:.1f} ms",
                    f"aim <= {CPU_AIM_MS} ms for the gateway: "
                    f"{'met' if fig['gw_cpu_ms'] <= CPU_AIM_MS else 'MISSED'}; the fake Bot API "
                    f"(this process) {med(r['bench_cpu_ms'] for r in rs):.1f} ms",
                )
            )
            last = rs[-1]
            detail = ", ".join(f"{m} {n:.2f}" for m, n in last["methods"].items())
            rows.append((f"  {name}: Bot API calls per message", f"{last['calls']:.2f}", detail))
            fsyncs = f"{last['fsyncs']:.2f}" if "fsyncs" in last else "not counted (--strace)"
            rows.append(
                (
                    f"  {name}: store commits / writes / fsyncs per message",
                    f"{last['commits']:.2f} / {last['writes']:.2f} / {fsyncs}",
                    "commits and writes from /metrics; fsyncs by strace (all threads)",
                )
            )
            rows.append(
                (
                    f"  {name}: gateway RSS (now / peak)",
                    f"{last['rss'][0] / 1024:.0f} / {last['rss'][1] / 1024:.0f} MB",
                    f"{sum(r['persisted'] for r in rs)} of {sum(r['total'] for r in rs)} "
                    "updates found in the inbox afterwards",
                )
            )
            rows.append(
                (
                    f"  {name}: warm-up (one msg per new chat)",
                    f"{med(r['warmup_s'] for r in rs):.2f} s",
                    "account + home each, not timed above",
                )
            )
        if "before" in by_tree:
            b, a = by_tree["before"], by_tree["after"]
            rows.append(
                (
                    f"{mode}: after / before",
                    f"x{a['rate'] / b['rate']:.2f} msgs/s",
                    f"gateway CPU per message x{a['gw_cpu_ms'] / b['gw_cpu_ms']:.2f}, its runs' "
                    f"x{a['kids_cpu_ms'] / max(b['kids_cpu_ms'], 1e-9):.2f}",
                )
            )
    rows.append(
        (
            "reference (issue 23, NOT measured here)",
            "214 / 512 msgs/s",
            "Jazz's own TypeScript Telegram bridge under Bun, seq / burst, same load and "
            "machine class, persisting nothing: ~x0.27 of the seq floor, x0.6-0.8 of burst; "
            "gateway CPU 1.2-2.0 ms per message",
        )
    )
    rows.append(
        (
            "settings",
            "min_send_interval_s = 0",
            "Telegram pacing (~1 msg/s per chat by default) off for the benchmark; "
            f"max_queued_per_conversation = 20; runner spawned per message: "
            f"bench/instant_runner.{'py' if args.runner == 'python' else 'sh'}",
        )
    )
    rows.append(
        (
            "machine",
            f"{os.cpu_count()} CPUs",
            f"{cpu_model()}; Python {platform.python_version()}; load average "
            f"{load_start[0]:.2f} at start, {load_end[0]:.2f} at end; "
            f"{'root' if os.geteuid() == 0 else 'not root'}; "
            f"{'one account per chat' if account is not None else 'isolation off'}",
        )
    )
    print(table(rows))
    for r in results:
        if r.get("profile") is not None and r["profile"].exists():
            print(f"\ngateway self time, {r['mode']}, top functions ({r['profile']}):")
            print(top_frames(r["profile"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
