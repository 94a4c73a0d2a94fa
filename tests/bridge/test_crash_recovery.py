"""The real `jazz-bridge serve` process: kill -9 and SIGTERM, then restart.

Nothing acknowledged is lost, nothing runs twice, nothing is replied twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from accounts_support import remove_accounts
from gateway_harness import Client, gateway_env, wait_until


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    e["JAZZ_BRIDGE_SERVER__PORT"] = str(free_port())
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


@asynccontextmanager
async def serve(
    env: dict[str, str], cwd: Path
) -> AsyncIterator[tuple[subprocess.Popen[bytes], Client]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge.cli", "serve"],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=open(cwd / "serve.log", "ab"),  # noqa: SIM115
    )
    base = f"http://127.0.0.1:{env['JAZZ_BRIDGE_SERVER__PORT']}"
    fake_dir = Path(__import__("json").loads(env["JAZZ_BRIDGE_RUNNER__EXTRA_ENV"])["FAKE_DIR"])
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:

            async def ready() -> bool:
                assert proc.poll() is None, (cwd / "serve.log").read_text()[-2000:]
                try:
                    async with session.get(f"{base}/readyz") as r:
                        return r.status == 200
                except aiohttp.ClientError:
                    return False

            await wait_until(ready, 30, "the gateway to be ready")
            yield proc, Client(base, session, fake_dir)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def replies(messages: list[dict[str, object]]) -> Counter[tuple[object, object]]:
    return Counter(
        (m["role"], m["text"]) for m in messages if m["role"] != "user" and not m.get("live")
    )


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def test_kill_9_during_a_run_and_a_queued_message(
    env: dict[str, str], tmp_path: Path
) -> None:
    async with serve(env, tmp_path) as (proc, client):
        await client.post("k", "hold K1", key="m1")
        await wait_until(lambda: len(client.starts("web:k")) == 1, what="K1 started")
        await client.post("k", "queued behind K1", key="m2")
        await client.post("other", "hold O1", key="m3")
        await wait_until(lambda: len(client.starts("web:other")) == 1, what="O1 started")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    held = [s["pid"] for s in client.starts()]
    async with serve(env, tmp_path) as (proc, client):
        # redeliveries of acknowledged messages are dropped
        again = await client.post("k", "hold K1", key="m1")
        assert again["duplicate"] is True
        await client.wait_role("k", "assistant")
        await client.wait_role("other", "status")
        msgs = await client.messages("k")
        interrupted = [m for m in msgs if "interrupted" in str(m["text"])]
        assert len(interrupted) == 1
        answers = [m for m in msgs if m["role"] == "assistant"]
        assert len(answers) == 1 and "queued behind K1" in str(answers[0]["text"])
        # the run that died with the gateway left no process behind
        await wait_until(lambda: all(_gone(p) for p in held), 15, "orphaned runs to be killed")
        k_prompts = [s["prompt"] for s in client.starts("web:k")]
        assert k_prompts == ["hold K1", "queued behind K1"]  # nothing ran twice
        before = {t: replies(await client.messages(t)) for t in ("k", "other")}
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
    async with serve(env, tmp_path) as (proc, client):
        after = {t: replies(await client.messages(t)) for t in ("k", "other")}
        assert after == before  # a restart replies nothing again
        assert all(n == 1 for c in after.values() for n in c.values())


async def test_sigterm_tells_runs_in_flight_and_exits_quickly(
    env: dict[str, str], tmp_path: Path
) -> None:
    async with serve(env, tmp_path) as (proc, client):
        await client.post("t", "hold T1")
        await wait_until(lambda: len(client.starts("web:t")) == 1, what="T1 started")
        runner_pid = client.starts("web:t")[0]["pid"]
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        assert time.monotonic() - t0 < 10
        assert proc.returncode == 0
        assert _gone(runner_pid)
    async with serve(env, tmp_path) as (proc, client):
        msgs = await client.messages("t")
        notices = [m for m in msgs if "shutting down" in str(m["text"])]
        assert len(notices) == 1
        assert not [m for m in msgs if "interrupted before" in str(m["text"])]
        assert len(client.starts("web:t")) == 1


def test_no_config_at_all_serves_the_web_chat(tmp_path: Path) -> None:
    """The embedded default: a fresh directory, no config, no credentials."""
    port = free_port()
    env = {"PATH": os.environ["PATH"], "JAZZ_BRIDGE_SERVER__PORT": str(port)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge.cli", "serve"],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        async def run() -> str:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s:

                async def ready() -> bool:
                    try:
                        async with s.get(f"http://127.0.0.1:{port}/readyz") as r:
                            return r.status == 200
                    except aiohttp.ClientError:
                        return False

                await wait_until(ready, 30, "ready")
                async with s.post(
                    f"http://127.0.0.1:{port}/api/threads/hi/messages",
                    json={"user": "me", "text": "hello"},
                ) as r:
                    assert r.status == 202
                found: list[str] = []

                async def answered() -> bool:
                    async with s.get(f"http://127.0.0.1:{port}/api/threads/hi/messages") as r:
                        data = await r.json()
                    found[:] = [m["text"] for m in data["messages"] if m["role"] == "assistant"]
                    return bool(found)

                await wait_until(answered, 30, "an answer")
                async with s.get(f"http://127.0.0.1:{port}/") as r:
                    assert "jazz-bridge" in await r.text()
                return found[0]

        answer = asyncio.run(run())
        assert "not an AI" in answer
        assert (tmp_path / "jazz-bridge-home" / "state" / "bridge.db").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert "reference runner" in err and "NOT an AI" in err
    remove_accounts(tmp_path / "jazz-bridge-home" / "state" / "accounts.json")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (one account per conversation)")
async def test_a_restart_kills_what_a_conversation_account_left_running(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A process left by a run that ended with the gateway (here: started as the account
    while the gateway was down) is killed when the gateway starts, before any new run."""
    async with serve(env, tmp_path) as (proc, client):
        await client.post("l", "hello")
        await client.wait_role("l", "assistant")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    accounts = json.loads((tmp_path / "root" / "state" / "accounts.json").read_text())
    (entry,) = accounts["accounts"].values()
    switch = ["setpriv", f"--reuid={entry['uid']}", f"--regid={entry['gid']}", "--clear-groups"]
    leftover = subprocess.Popen(
        [*switch, "sleep", "600"],
        start_new_session=True,
        env={"PATH": "/usr/bin:/bin"},
        cwd="/",
    )
    try:
        async with serve(env, tmp_path):
            await wait_until(lambda: leftover.poll() is not None, 15, "the leftover killed")
        assert leftover.returncode == -signal.SIGKILL
    finally:
        leftover.kill()
        leftover.wait(timeout=10)
