"""Telegram long polling: an update is persisted before the offset moves on, and a gateway
stopped (or killed) between fetching an update and acknowledging it never runs it twice.

The fake Bot API forgets an update only when a ``getUpdates`` call's offset passes it, as
Telegram does; with ``hold()`` it holds that acknowledging call instead, so the gateway can
be stopped or killed while Telegram still has the update.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from fake_bot_api import Failure
from gateway_harness import install_fake_runner
from tg_support import (
    ADA,
    BOT,
    GRACE,
    Client,
    FakeBotApi,
    polling,
    press,
    private_chat,
    running_gateway,
    sample,
    texts,
    update,
    wait_sent,
    wait_until,
)

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
OFFSET_KEY = f"telegram:{BOT}:offset"


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    """The package's environment (conftest.py) in polling mode."""
    return polling(env)


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
    env.update(install_fake_runner(fake_dir))
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


def refuse_get_updates_while_a_webhook_is_set(fake: FakeBotApi) -> None:
    """As Telegram does: getUpdates is a 409 Conflict while a webhook is registered."""
    body = {
        "ok": False,
        "error_code": 409,
        "description": "Conflict: can't use getUpdates method while webhook is active; "
        "use deleteWebhook to delete the webhook first",
    }
    for _ in range(200):  # each Failure answers one call
        fake.failures.append(Failure("getUpdates", 409, body, lambda _p: bool(fake.webhook_url)))


async def test_polling_deletes_the_webhook_again_after_a_conflict(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """Switching a bot from webhook to polling: the start's deleteWebhook meets a transient
    5xx, and getUpdates is refused with 409 while the webhook is set. The poll loop used to
    retry only getUpdates, so nothing was fetched again until a restart; now a 409 deletes
    the webhook again before the next getUpdates."""
    fake.webhook_url = "https://old.example/telegram/webhook"  # registered by an earlier run
    refuse_get_updates_while_a_webhook_is_set(fake)
    fake.fail("deleteWebhook", "5xx")
    fake.queue_update(update(730200001, private_chat(ADA), ADA, "are you there?"))
    async with running_gateway(env) as (_app, _client):
        await wait_sent(fake, ADA, "are you there?", timeout=15)
    assert fake.called("deleteWebhook", ok=False) and fake.called("deleteWebhook")
    assert not fake.webhook_url


def fetched(fake: FakeBotApi, update_id: int) -> int:
    """How many getUpdates answers handed out this update."""
    return sum(
        any(u.get("update_id") == update_id for u in c.result or ())
        for c in fake.called("getUpdates")
    )


async def test_polling_gets_past_an_update_that_can_never_be_stored(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """The webhook refuses a body with half a surrogate pair (guard.problem, a 400), as no
    store can keep it. Polling had no such check: the update reached ``store.accept``, which
    raised UnicodeEncodeError every time, and any failure stopped the offset before it for
    ever, so a callback query behind it (a barrier) was never handled nor answered, and
    once 100 updates waited behind it nothing newer was fetched. Now polling applies the
    webhook's check, and only a store failure holds the offset back."""
    fake.queue_update(update(730600001, private_chat(GRACE), GRACE, "broken \ud800 text"))
    fake.queue_update(press(730600002, ADA, private_chat(ADA), "not-a-gateway-button"))
    async with running_gateway(env) as (app, _client):
        await wait_until(
            lambda: bool(fake.called("answerCallbackQuery")), 10, "the press behind it answered"
        )
        await wait_until(lambda: polled_from(fake, 730600003), 10, "both acknowledged")
        malformed = sample(
            app, "jazz_bridge_messages_total", platform="telegram", outcome="malformed"
        )
        assert malformed == 1
        assert accepted(app) == 0
    assert fetched(fake, 730600001) == 1


async def test_polling_holds_the_offset_while_the_store_cannot_write(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """A store that cannot write now (its lock held past the busy timeout) is the one
    failure that keeps the offset before the update: Telegram hands it out again, and it
    runs once the store can write."""
    db = Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"
    async with running_gateway(env) as (app, _client):
        await wait_until(lambda: bool(fake.called("getUpdates")), 10, "polling")
        with contextlib.closing(sqlite3.connect(db, isolation_level=None, timeout=10)) as lock:
            lock.execute("BEGIN IMMEDIATE")  # what another writer holding the store does
            fake.queue_update(update(730600101, private_chat(ADA), ADA, "after the lock"))
            await wait_until(lambda: fetched(fake, 730600101) >= 2, 30, "fetched again")
            assert not polled_from(fake, 730600102)
            lock.execute("ROLLBACK")
        await wait_sent(fake, ADA, "You said:\n\nafter the lock", timeout=30)
        await wait_until(lambda: polled_from(fake, 730600102), 15, "acknowledged")
        assert accepted(app) == 1
    assert len(texts(fake, ADA, "You said:\n\nafter the lock")) == 1
