"""Store faults and gateway faults never leave an acknowledged message unanswered.

* a message that ended ``interrupted``/``failed`` with no reply (what a stop between two
  writes left) is told "interrupted, send again" at start, once;
* a store that cannot write while a reply is marked sent (another process holding the
  write lock: "database is locked", a real store error like a full disk's) is waited out:
  the rest of the answer follows, a later answer does not overtake it, nothing is sent
  twice, not even after a restart;
* commands hit by the same store error are answered once, and ``/new`` bumps the epoch once;
* a run the gateway cannot start (an OSError of its own, not the runner's) is answered with
  why, at once, not left ``running`` until the next start.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import plain_surface
import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway, wait_until

import bridge.store.sqlite.files as sqlite_files
from bridge.engine import INTERRUPTED_TEXT
from bridge.model import Inbound, InboxState, Outgoing, ReplyTarget
from bridge.ports import AdapterContext, AdapterSpec
from bridge.store import RunOutcome, SqliteStore
from provisioning import naming

KEY = "plain:room"
RETRIED = "the store cannot write"  # what the shared retry logs for each failed write


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    e["JAZZ_BRIDGE_ISOLATION"] = "off"
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def database(env: dict[str, str]) -> Path:
    return Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"


def inbound(event_id: str, text: str) -> Inbound:
    return Inbound(platform="plain", event_id=event_id, thread_key=KEY, sender_id="u", text=text)


class WriteLock:
    """Another process's write transaction on the store (an operator's ``sqlite3`` shell
    left inside ``BEGIN IMMEDIATE``): each write of the gateway fails with "database is
    locked" once its busy timeout is over (a real store error, as a full disk's is), while
    reads go on."""

    def __init__(self, db: Path) -> None:
        self.conn = sqlite3.connect(db, isolation_level=None)

    def hold(self, seconds: float) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        asyncio.get_running_loop().call_later(seconds, self.conn.execute, "ROLLBACK")


@pytest.fixture
async def write_lock(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[WriteLock]:
    """A :class:`WriteLock` on the gateway's database (created by a first start).

    The store's busy timeout (a module setting, 5 s) is cut to 0.2 s so that a held lock
    fails a write quickly; the lock is held well past it, so each fault is a real failure.
    """
    monkeypatch.setattr(sqlite_files, "BUSY_TIMEOUT_MS", 200)
    caplog.set_level(logging.WARNING)
    await _first_life(env)
    lock = WriteLock(database(env))
    yield lock
    lock.conn.close()


async def _first_life(env: dict[str, str]) -> None:
    async with running_gateway(env, {"plain": plain_surface.SPEC}):
        pass


def retried(caplog: pytest.LogCaptureFixture) -> int:
    return sum(RETRIED in r.getMessage() for r in caplog.records)


async def nothing_sent_after_restart(env: dict[str, str]) -> None:
    async with running_gateway(env, {"plain": plain_surface.SPEC}):
        surface = plain_surface.INSTANCES[-1].surface
        await asyncio.sleep(1.0)
        assert surface.sent == []
    store = SqliteStore(database(env))
    await store.open()
    try:
        assert await store.undelivered_replies() == []
        assert await store.messages_in_state(InboxState.ACCEPTED) == []
        assert await store.messages_in_state(InboxState.RUNNING) == []
    finally:
        await store.close()


# -- a message finished with no reply --------------------------------------------------------


@pytest.mark.parametrize("state", [InboxState.INTERRUPTED, InboxState.FAILED])
async def test_a_message_finished_without_a_reply_is_told_once_at_start(
    env: dict[str, str], state: InboxState
) -> None:
    await _first_life(env)
    store = SqliteStore(database(env))
    await store.open()
    msg, _ = await store.accept(inbound("e1", "hi"), home=naming.home_name(KEY), is_command=False)
    run = await store.start_run(msg.id, "u", 1)
    # what a gateway that closed a run in two writes left when it stopped between them
    outcome = RunOutcome(ok=False, exit_code=None, envelope_code="interrupted")
    await store.finish_run(run.id, outcome, state, [])
    await store.close()

    async with running_gateway(env, {"plain": plain_surface.SPEC}):
        surface = plain_surface.INSTANCES[-1].surface
        await wait_until(lambda: len(surface.sent) >= 1, 15, "the interrupted notice")
        await asyncio.sleep(0.3)
        assert surface.sent == [(f"interrupted:{msg.id}", surface.sent[0][1])]
        assert surface.texts() == [INTERRUPTED_TEXT]
    await nothing_sent_after_restart(env)


# -- a store error while a reply is marked sent ----------------------------------------------


class LockingSurface(plain_surface.PlainSurface):
    """The plain platform; the store's write lock is taken as one chosen reply is posted."""

    lock_on: tuple[str, WriteLock, float] | None = None

    async def send(self, target: ReplyTarget, message: Outgoing, *, reply_key: str) -> str:
        ref = await super().send(target, message, reply_key=reply_key)
        if self.lock_on is not None and reply_key == self.lock_on[0]:
            _, lock, seconds = self.lock_on
            lock.hold(seconds)  # posted; the gateway's mark "sent" comes next and fails
        return ref


class LockingAdapter(plain_surface.PlainAdapter):
    def __init__(self, ctx: AdapterContext) -> None:
        super().__init__(ctx)
        self.surface = LockingSurface()


LOCKING_SPEC = AdapterSpec(
    "plain", "plain", plain_surface.PlainSettings, LockingAdapter, lambda s: bool(s.enabled)
)


async def test_a_store_error_marking_a_reply_sent_strands_nothing_and_repeats_nothing(
    env: dict[str, str], write_lock: WriteLock, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_gateway(env, {"plain": LOCKING_SPEC}) as (app, client):
        surface = plain_surface.INSTANCES[-1].surface
        assert isinstance(surface, LockingSurface)
        long = "hold A " + " ".join(f"word{i:04d}" for i in range(500))  # three parts
        first = await app.engine.submit(inbound("e1", long))
        await wait_until(lambda: len(client.starts(KEY)) == 1, 15, "the first run")
        second = await app.engine.submit(inbound("e2", "two"))
        queued = f"queued:{second.message_id}"
        await wait_until(lambda: queued in [k for k, _ in surface.sent], 15, "the queued notice")
        surface.lock_on = (f"answer:{first.message_id}:0", write_lock, 1.5)
        client.release("A")
        done = f"answer:{second.message_id}:0"
        await wait_until(lambda: done in [k for k, _ in surface.sent], 30, "the second answer")
        await asyncio.sleep(0.5)
        answers = [k for k, _ in surface.sent if k.startswith("answer:")]
        assert answers == [
            f"answer:{first.message_id}:0",
            f"answer:{first.message_id}:1",
            f"answer:{first.message_id}:2",
            done,
        ]
        assert retried(caplog) >= 1  # the lock did fail a write
    await nothing_sent_after_restart(env)


# -- commands hit by a store error -----------------------------------------------------------


@pytest.mark.parametrize("command", ["/status", "/new"])
async def test_a_command_hit_by_a_store_error_is_answered_once(
    env: dict[str, str], write_lock: WriteLock, caplog: pytest.LogCaptureFixture, command: str
) -> None:
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        await app.engine.submit(inbound("e1", command))
        write_lock.hold(1.5)  # before the command's task has run: its write fails first
        await wait_until(lambda: len(surface.sent) >= 1, 20, "the command's answer")
        await asyncio.sleep(0.5)
        assert len(surface.sent) == 1
        assert retried(caplog) >= 1
        if command == "/new":
            assert "(#2)" in surface.texts()[0]
    await nothing_sent_after_restart(env)
    store = SqliteStore(database(env))
    await store.open()
    try:
        conv = await store.conversation_by_key(KEY)
        assert conv is not None and conv.epoch == (2 if command == "/new" else 1)
    finally:
        await store.close()


# -- a run the gateway cannot start ----------------------------------------------------------


async def test_a_run_the_gateway_cannot_start_is_answered_with_why(env: dict[str, str]) -> None:
    """One environment value over the kernel's 128 KiB per string: starting the runner fails
    in the gateway itself with E2BIG, an OSError no runner mapping knows."""
    extra = json.loads(env["JAZZ_BRIDGE_RUNNER__EXTRA_ENV"])
    extra["JAZZ_TEST_HUGE"] = "x" * 200_000
    env["JAZZ_BRIDGE_RUNNER__EXTRA_ENV"] = json.dumps(extra)
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        sent = await app.engine.submit(inbound("e1", "hello"))
        await wait_until(lambda: len(surface.sent) >= 1, 15, "the error reply")
        assert surface.sent[0][0] == f"error:{sent.message_id}"
        text = surface.texts()[0]
        assert "the gateway could not start the run" in text, text
        assert "Argument list too long" in text, text
        msg = await app.store.get_message(sent.message_id)
        assert msg is not None and msg.state is InboxState.FAILED
        runs = await app.store.runs(msg.conversation_id)
        assert [r.outcome.envelope_code for r in runs if r.outcome] == ["gateway_error"]
    await nothing_sent_after_restart(env)
