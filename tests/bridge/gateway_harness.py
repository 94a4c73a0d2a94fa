"""Test harness: the real gateway (in process, or as a `jazz-bridge serve` subprocess)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from bridge.app import GatewayApp
from bridge.config import load_settings
from bridge.engine import conversation_prefix
from bridge.plugins import load_specs
from bridge.ports import AdapterSpec
from bridge.runner.command import shared_interpreter
from reference_runner import bundle

FAKE_RUNNER = Path(__file__).resolve().parent.parent / "fakes" / "fake_runner.py"
FAKE_JAZZ = FAKE_RUNNER.with_name("fake_jazz.py")  # the released Jazz CLI's
TEST_RUNNER_ENV = "JB_TEST_RUNNER"


def use_reference_runner(env: dict[str, str], fake_dir: Path) -> None:
    """Run the bundled reference runner (a copy every account can read) instead of the fake:
    its one-file form, as serve writes it under ``<root>/tools/``."""
    runner = fake_dir / f"reference_runner{bundle.SUFFIX}"
    runner.write_bytes(bundle.archive())
    os.chmod(runner, 0o755)
    env["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps([shared_interpreter(), str(runner)])


async def wait_until(
    pred: Callable[[], Awaitable[bool] | bool], timeout: float = 20.0, what: str = "condition"
) -> None:
    """Poll a condition until it holds; fail after ``timeout`` seconds (bounded wait)."""
    deadline = time.monotonic() + timeout
    while True:
        result = pred()
        if asyncio.iscoroutine(result) or isinstance(result, Awaitable):
            result = await result  # type: ignore[misc]
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


# no pid is ever this high (the kernel's PID_MAX_LIMIT): a pid of a namespace that is gone
GONE_PID_BASE = 1 << 22


def _own_pid_namespace() -> str:
    return os.readlink("/proc/self/ns/pid")


def _start_time(pid: str) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[19])


def host_pid(pidns: str, pid: int, started: int = 0) -> int:
    """The host's pid of ``pid`` in the PID namespace ``pidns`` (a run whose prompt is on
    argv has one of its own) that started at ``started`` (clock ticks since boot), or a pid
    no process has when that process is gone."""
    if not pidns or pidns == _own_pid_namespace():
        return pid
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") != pidns:
                continue
            with open(f"/proc/{entry}/status") as fh:
                nspid = next(ln for ln in fh if ln.startswith("NSpid:")).split()[1:]
        except (OSError, StopIteration):
            continue
        if nspid and int(nspid[-1]) == pid:
            with contextlib.suppress(OSError, ValueError, IndexError):
                if not started or _start_time(entry) == started:
                    return int(entry)
    return GONE_PID_BASE + pid


def run_events(fake_dir: Path) -> list[dict[str, Any]]:
    """Every event the fake runner logged in ``fake_dir`` (one log per process), in order;
    pids are the host's (see :func:`host_pid`)."""
    events = [
        json.loads(line)
        for path in fake_dir.glob("run-*.log")
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    for event in events:
        ns = event.get("pidns", "")
        if ns and "pid" in event:
            event["pid"] = host_pid(ns, event["pid"], event.get("started", 0))
        if ns and "pids" in event:  # its children: started later, any time
            event["pids"] = [host_pid(ns, p) for p in event["pids"]]
    return sorted(events, key=lambda e: e["t"])


def run_starts(fake_dir: Path, thread: str = "") -> list[dict[str, Any]]:
    """The runs the fake runner started: all, those of the thread key ``thread``, or, for a
    platform's prefix (``telegram:``), those of its threads (by their homes' names: a run's
    ``--conversation`` is opaque)."""
    starts = [r for r in run_events(fake_dir) if r["event"] == "start"]
    if thread.endswith(":"):
        home = thread[:-1] + "-"
        return [r for r in starts if os.path.basename(r.get("home") or "").startswith(home)]
    prefix = conversation_prefix(thread) if thread else ""
    return [r for r in starts if r["conversation"].startswith(prefix)]


def released_cli() -> bool:
    """Whether this test session runs the end-to-end suite against the fake of the released
    Jazz CLI (``JB_TEST_RUNNER=released``, as scripts/test.sh's second pass does) instead of
    the fake of the documented contract."""
    return os.environ.get(TEST_RUNNER_ENV, "documented") == "released"


def install_fake_runner(
    fake_dir: Path, released: bool | None = None, *, provider: str = "llamacpp"
) -> dict[str, str]:
    """The session's fake runner (or the released CLI's, ``released``) copied into
    ``fake_dir`` (conversation accounts must be able to run it: a copy next to the log, a
    shared Python) and the settings that use it; the released CLI's fake also gets the home
    template a real Jazz needs, its agent on ``provider`` (llamacpp: free, its $0 runs are
    priced; a paid one such as openai: its $0 runs are unpriced, as the documented fake's
    all are)."""
    if not (released_cli() if released is None else released):
        runner = fake_dir / "fake_runner.py"
        shutil.copyfile(FAKE_RUNNER, runner)
        os.chmod(runner, 0o755)
        return {"JAZZ_BRIDGE_RUNNER__COMMAND": json.dumps([shared_interpreter(), str(runner)])}
    runner = fake_dir / "fake_jazz.py"
    shutil.copyfile(FAKE_JAZZ, runner)
    os.chmod(runner, 0o755)
    template = fake_dir / "home-template"
    (template / "agents").mkdir(parents=True, exist_ok=True)
    (template / "config.json").write_text(json.dumps({"llm": {"llamacpp": {}}}))
    agent = {"id": "default", "name": "default", "config": {"llmProvider": provider}}
    (template / "agents" / "default.json").write_text(json.dumps(agent))
    return {
        "JAZZ_BRIDGE_RUNNER__COMMAND": json.dumps([shared_interpreter(), str(runner)]),
        "JAZZ_BRIDGE_RUNNER__HOME_TEMPLATE": str(template),
    }


def gateway_env(
    root: Path, fake_dir: Path, uid_range: tuple[int, int], **extra: str
) -> dict[str, str]:
    env = {
        "JAZZ_BRIDGE_ROOT": str(root),
        "JAZZ_BRIDGE_SERVER__PORT": "0",
        **install_fake_runner(fake_dir),
        "JAZZ_BRIDGE_RUNNER__EXTRA_ENV": json.dumps({"FAKE_DIR": str(fake_dir)}),
        "JAZZ_BRIDGE_RUNNER__KILL_GRACE_S": "1",
        "JAZZ_BRIDGE_PROGRESS__FIRST_AFTER_S": "0.3",
        "JAZZ_BRIDGE_ACCOUNTS__UID_MIN": str(uid_range[0]),
        "JAZZ_BRIDGE_ACCOUNTS__UID_MAX": str(uid_range[1]),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }
    if "XDG_STATE_HOME" in os.environ:  # the session's (tests/conftest.py): serve records
        env["XDG_STATE_HOME"] = os.environ["XDG_STATE_HOME"]  # its root there, not /var/lib
    env.update(extra)
    return env


def run_cli(
    env: dict[str, str],
    *args: str,
    timeout: float = 120,
    cwd: Path | None = None,
    inherit: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``jazz-bridge ARGS`` as an operator runs it, with the gateway's environment (bounded).
    ``cwd``: where it runs (a relative path, ``./jazz-bridge.toml``); ``inherit=False``: with
    ``env`` alone, none of this process's environment (an operator's small one)."""
    return subprocess.run(
        [sys.executable, "-m", "bridge.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, **env} if inherit else env,
    )


class Client:
    def __init__(self, base: str, session: aiohttp.ClientSession, fake_dir: Path) -> None:
        self.base = base
        self.session = session
        self.fake_dir = fake_dir

    async def post(
        self, thread: str, text: str, user: str = "ada", key: str | None = None
    ) -> dict[str, Any]:
        headers = {"Idempotency-Key": key} if key else {}
        async with self.session.post(
            f"{self.base}/api/threads/{thread}/messages",
            json={"user": user, "text": text},
            headers=headers,
        ) as resp:
            assert resp.status == 202, await resp.text()
            data: dict[str, Any] = await resp.json()
            return data

    async def messages(self, thread: str) -> list[dict[str, Any]]:
        async with self.session.get(f"{self.base}/api/threads/{thread}/messages") as resp:
            assert resp.status == 200
            data = await resp.json()
            return list(data["messages"])

    async def press(self, thread: str, token: str, user: str) -> tuple[int, dict[str, Any]]:
        async with self.session.post(
            f"{self.base}/api/threads/{thread}/choices", json={"user": user, "token": token}
        ) as resp:
            return resp.status, await resp.json()

    async def wait_role(
        self, thread: str, role: str | tuple[str, ...], count: int = 1, timeout: float = 20
    ) -> list[dict[str, Any]]:
        """The thread's messages of ``role`` (or of any of several), once ``count`` are in."""
        found: list[dict[str, Any]] = []
        roles = (role,) if isinstance(role, str) else role

        async def check() -> bool:
            nonlocal found
            found = [m for m in await self.messages(thread) if m["role"] in roles]
            return len(found) >= count

        await wait_until(check, timeout, f"{count} {role} message(s) in {thread}")
        return found

    async def live_stop(self, thread: str) -> str:
        """The Stop token of ``thread``'s progress bubble, once it shows."""
        found: list[dict[str, Any]] = []

        async def shown() -> bool:
            found[:] = [
                c for m in await self.messages(thread) if m.get("live") for c in m["choices"]
            ]
            return bool(found)

        await wait_until(shown, what=f"the progress bubble of {thread} with its Stop")
        return str(found[0]["token"])

    def runs(self) -> list[dict[str, Any]]:
        return run_events(self.fake_dir)

    def starts(self, thread: str = "") -> list[dict[str, Any]]:
        return run_starts(self.fake_dir, thread)

    def release(self, name: str) -> None:
        (self.fake_dir / f"release-{name}").touch()


@asynccontextmanager
async def running_gateway(
    env: dict[str, str], extra_specs: dict[str, AdapterSpec] | None = None
) -> AsyncIterator[tuple[GatewayApp, Client]]:
    specs = {**load_specs(), **(extra_specs or {})}
    settings = load_settings(
        None, adapter_sections={k: s.settings_model for k, s in specs.items()}, environ=env
    )
    app = GatewayApp(settings, specs)
    try:
        await app.initialize()
        await app.start()
    except BaseException:
        await app.stop()
        raise
    fake_dir = Path(json.loads(env["JAZZ_BRIDGE_RUNNER__EXTRA_ENV"])["FAKE_DIR"])
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            yield app, Client(f"http://127.0.0.1:{app.port}", session, fake_dir)
    finally:
        await app.stop()
