"""Telegram long polling: an update is persisted before the offset moves on, and a gateway
stopped (or killed) between fetching an update and acknowledging it never runs it twice.

The fake Bot API forgets an update only when a ``getUpdates`` call's offset passes it, as
Telegram does; with ``hold()`` it holds that acknowledging call instead, so the gateway can
be stopped or killed while Telegram still has the update.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tg_support import (
    ADA,
    BOT,
    GRACE,
    Client,
    FakeBotApi,
    press,
    private_chat,
    running_gateway,
    sample,
    texts,
    update,
    wait_sent,
    wait_until,
)

from bridge.runner.cli import shared_interpreter

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
OFFSET_KEY = f"telegram:{BOT}:offset"


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    """The package's environment (conftest.py) in polling mode: no webhook URL."""
    del env["JAZZ_BRIDGE_TELEGRAM__WEBHOOK_URL"]
    env["JAZZ_BRIDGE_TELEGRAM__POLL_TIMEOUT_S"] = "1"
    return env


def accepted(app: Any) -> float:
    return sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="accepted")


def polled_from(fake: FakeBotApi, offset: int, after: int = 0) -> bool:
    """A getUpdates with this offset was answered (so Telegram forgot what lies before it)."""
    return any(
        c.status == 200 and c.params.get("offset") == offset
        for c in fake.called("getUpdates")[after:]
    )


async def test_polling_stopped_between_fetch_and_ack_runs_nothing_twice(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    chat = private_chat(ADA)
    first, second = update(730003000, chat, ADA, "first"), update(730003010, chat, ADA, "second")

    # 1. fetched, persisted and run; the acknowledging getUpdates never reaches Telegram, and
    #    (as in a crash between the inbox write and the offset write) the offset is lost
    fake.hold()
    fake.queue_update(first)
    async with running_gateway(env) as (app, _client):
        await wait_sent(fake, ADA, "You said:\n\nfirst")
        await wait_until(lambda: bool(fake.held), 10, "the acknowledgement held")
        assert fake.held[0]["offset"] == 730003001

        async def offset_stored() -> bool:  # a restart hint, written beside the next poll
            return await app.store.get_kv(OFFSET_KEY) == "730003001"

        await wait_until(offset_stored, 10, "the offset stored")
        assert accepted(app) == 1
        await app.store.set_kv(OFFSET_KEY, "")
    fake.release_acks()
    assert [u["update_id"] for u in fake.updates] == [730003000]  # Telegram still has it

    # 2. so it is delivered again: dropped as a duplicate by its update_id, never run again
    async with running_gateway(env) as (app, _client):
        await wait_until(lambda: polled_from(fake, 730003001), 15, "the redelivery acked")
        assert (
            sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="duplicate") == 1
        )
        assert accepted(app) == 0
        assert sample(app, "jazz_bridge_runs_total", outcome="ok") == 0
        assert not fake.updates

        # 3. a second update, and a plain stop while its acknowledgement is in flight
        fake.hold()
        fake.queue_update(second)
        await wait_sent(fake, ADA, "You said:\n\nsecond")
        await wait_until(lambda: bool(fake.held), 10, "the acknowledgement held")
    fake.release_acks()
    assert [u["update_id"] for u in fake.updates] == [730003010]

    # 4. the restarted gateway goes on from the stored offset: Telegram forgets it, unrun
    calls = len(fake.called("getUpdates"))
    async with running_gateway(env) as (app, _client):
        await wait_until(lambda: polled_from(fake, 730003011, calls), 15, "polled from the offset")
        assert fake.called("getUpdates")[calls].params.get("offset") == 730003011
        assert not fake.updates
        assert accepted(app) == 0
        assert sample(app, "jazz_bridge_runs_total", outcome="ok") == 0
    assert len(texts(fake, ADA, "You said:\n\nfirst")) == 1
    assert len(texts(fake, ADA, "You said:\n\nsecond")) == 1


async def test_a_polled_batch_runs_in_order_per_chat(env: dict[str, str], fake: FakeBotApi) -> None:
    # one getUpdates batch: two chats interleaved, a button press in the middle (a barrier)
    ada, grace = private_chat(ADA), private_chat(GRACE)
    ids = iter(range(730005000, 730006000))
    for k in range(12):
        fake.queue_update(update(next(ids), ada, ADA, f"ada {k:02d}"))
        fake.queue_update(update(next(ids), grace, GRACE, f"grace {k:02d}"))
        if k == 5:
            fake.queue_update(press(next(ids), ADA, ada, "no-such-token"))
    last = next(ids) - 1
    env["JAZZ_BRIDGE_LIMITS__MAX_QUEUED_PER_CONVERSATION"] = "12"
    async with running_gateway(env) as (app, _client):
        await wait_sent(fake, ADA, "You said:\n\nada 11", timeout=60)
        await wait_sent(fake, GRACE, "You said:\n\ngrace 11", timeout=60)
        await wait_until(lambda: polled_from(fake, last + 1), 15, "the batch acknowledged")
        assert accepted(app) == 24
        assert fake.called("answerCallbackQuery")  # the stale press was answered, not run
    for chat, who in ((ADA, "ada"), (GRACE, "grace")):
        said = [
            t.split("You said:\n\n", 1)[1].split("\n", 1)[0] for t in texts(fake, chat, "You said:")
        ]
        assert said == [f"{who} {k:02d}" for k in range(12)], said
    assert not fake.updates  # every update confirmed, none left


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def serve(env: dict[str, str], cwd: Path) -> AsyncIterator[subprocess.Popen[bytes]]:
    """``jazz-bridge serve`` as its own process, ready when /readyz says so."""
    with open(cwd / "serve.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bridge.cli", "serve"],
            env=env,
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    base = f"http://127.0.0.1:{env['JAZZ_BRIDGE_SERVER__PORT']}"
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
            yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


async def test_polling_killed_between_fetch_and_ack_runs_nothing_twice(
    env: dict[str, str], fake: FakeBotApi, fake_dir: Path, tmp_path: Path
) -> None:
    # the tests' own runner: `hold K1` keeps the run going until the test lets it go
    env["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps(
        [shared_interpreter(), str(fake_dir / "fake_runner.py")]
    )
    env["JAZZ_BRIDGE_SERVER__PORT"] = str(free_port())
    runs = Client("", None, fake_dir)  # type: ignore[arg-type]  # only reads the runner's logs
    fake.hold()
    fake.queue_update(update(730004000, private_chat(ADA), ADA, "hold K1"))
    async with serve(env, tmp_path) as proc:
        await wait_until(lambda: len(runs.starts("telegram:")) == 1, 30, "the run started")
        await wait_until(lambda: bool(fake.held), 15, "the acknowledgement held")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    fake.release_acks()
    assert [u["update_id"] for u in fake.updates] == [730004000]  # Telegram still has it
    calls = len(fake.called("getUpdates"))
    async with serve(env, tmp_path):
        # the acknowledged message was in the inbox: answered as interrupted, not run again
        await wait_sent(fake, ADA, "interrupted")
        await wait_until(lambda: polled_from(fake, 730004001, calls), 15, "polled from the offset")
        assert not fake.updates
        assert len(runs.starts("telegram:")) == 1
    assert len(texts(fake, ADA, "interrupted")) == 1
    assert not texts(fake, ADA, "fake answer")
