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
import json
import os
import platform
import shutil
import signal
import socket
import sqlite3
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
REFERENCE = {"seq": 370.0, "burst": 830.0}  # msgs/s, the TypeScript bridge, from issue 7
FIRST_CHAT = 500_000_001
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


def proc_cpu_s(pid: int) -> tuple[float, float]:
    """CPU seconds of ``pid`` itself and of its children it has waited for (/proc stat)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()  # after the command name, from field 3 on
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])  # fields 14-17
    tick = os.sysconf("SC_CLK_TCK")
    return (utime + stime) / tick, (cutime + cstime) / tick


def rss_kb(pid: int) -> tuple[int, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields.get("VmRSS", 0), fields.get("VmHWM", 0)


async def one_mode(
    mode: str, args: argparse.Namespace, tmp: Path, runner_argv: list[str]
) -> dict[str, Any]:
    fake = TimedBotApi(TOKEN)
    await fake.start()
    root = tmp / f"root-{mode}"
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
        [str(JAZZ_BRIDGE), "serve"], env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=stderr
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
        timed: list[tuple[int, int, int]] = []  # (update id, chat, k-th answer of that chat)
        gw0, kids0 = proc_cpu_s(proc.pid)
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
        gw1, kids1 = proc_cpu_s(proc.pid)
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
            bench_cpu_ms=bench_cpu / total * 1000,
        )
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
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up on SIGTERM too
    load_start = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="bench-telegram-"))
    os.chmod(tmp, 0o755)  # conversation accounts run the runner from here
    for name in ("instant_runner.py", "instant_runner.sh"):
        shutil.copyfile(HERE / name, tmp / name)
        os.chmod(tmp / name, 0o755)
    results = []
    floors: dict[str, dict[str, float]] = {}
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
        for mode in args.modes:
            # the floor: the same runner spawned alone, as the gateway spawns it (one at a
            # time for seq; at the gateway's run limit for burst), no gateway, no store
            level = 1 if mode == "seq" else RUN_LIMIT
            floors[mode] = asyncio.run(floor.rate(args.messages, level))
            results.append(asyncio.run(one_mode(mode, args, tmp, runner_argv)))
    finally:
        if account is not None:
            account.remove()
        for root in tmp.glob("root-*"):
            remove_gateway_accounts(root)
        shutil.rmtree(tmp, ignore_errors=True)
    load_end = os.getloadavg()
    rows = [("measure", "value", "ratio / note")]
    for r in results:
        mode = r["mode"]
        ref = REFERENCE[mode]
        fl = floors[mode]
        rows.append(
            (
                f"{mode}: runner spawned alone (the floor), runs/s",
                f"{fl['rate']:.1f}",
                f"{'one at a time' if mode == 'seq' else f'{RUN_LIMIT} at a time'}, as "
                f"{'a throwaway account' if account is not None else 'this account'}; "
                f"CPU per run: spawner {fl['cpu_ms']:.1f} ms, runner {fl['kids_ms']:.1f} ms",
            )
        )
        rows.append(
            (
                f"{mode}: msgs/s",
                f"{r['rate']:.1f}",
                f"x{r['rate'] / fl['rate']:.2f} of the floor; x{r['rate'] / ref:.2f} of the "
                f"reference {ref:.0f} msgs/s (aim x1.5 = {ref * 1.5:.0f}: "
                f"{'met' if r['rate'] >= ref * 1.5 else 'MISSED'})",
            )
        )
        rows.append(
            (
                f"  {mode}: update handed out -> answer's sendMessage, p50 / p95",
                f"{r['p50'] * 1000:.1f} / {r['p95'] * 1000:.1f} ms",
                f"{r['total']} msgs over {args.chats} private chats",
            )
        )
        rows.append(
            (
                f"  {mode}: CPU per message: gateway / its runs",
                f"{r['gw_cpu_ms']:.1f} / {r['kids_cpu_ms']:.1f} ms",
                f"{r['gw_cpu_ms'] * r['rate'] / 10:.0f}% of one core for the gateway; "
                f"the fake Bot API (this process) {r['bench_cpu_ms']:.1f} ms",
            )
        )
        detail = ", ".join(f"{m} {n:.2f}" for m, n in r["methods"].items())
        rows.append((f"  {mode}: Bot API calls per message", f"{r['calls']:.2f}", detail))
        rows.append(
            (
                f"  {mode}: gateway RSS (now / peak)",
                f"{r['rss'][0] / 1024:.0f} / {r['rss'][1] / 1024:.0f} MB",
                f"{r['persisted']} of {r['total']} updates found in the inbox afterwards",
            )
        )
        rows.append(
            (
                f"  {mode}: warm-up (one msg per new chat)",
                f"{r['warmup_s']:.2f} s",
                "account + home each, not timed above",
            )
        )
    rows.append(
        (
            "reference (from issue 7, NOT measured here)",
            "370 / 830 msgs/s",
            "the leading TypeScript bridge, seq / burst, same load, this machine class, "
            "persisting nothing",
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
