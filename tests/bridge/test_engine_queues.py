"""The engine's queues over time: the order /new sets, what a restart requeues, a status
line that cannot be written, and what an idle conversation leaves in memory."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import plain_surface
import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway, wait_until
from gateway_harness import run_starts as starts

from bridge.engine import conversation_name
from bridge.model import Inbound, InboxState
from bridge.store import PromptRecord, SqliteStore
from provisioning import naming

KEY = "plain:room"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    e["JAZZ_BRIDGE_ISOLATION"] = "off"
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def inbound(event_id: str, text: str, *, thread: str = KEY, user: str = "u1") -> Inbound:
    return Inbound(
        platform="plain", event_id=event_id, thread_key=thread, sender_id=user, text=text
    )


async def test_a_message_sent_after_new_runs_in_the_new_conversation(
    env: dict[str, str], fake_dir: Path
) -> None:
    """``/new`` then a message, handed in one after the other (as Telegram's polling hands in
    a batch, or two quick webhooks): the message comes after ``/new`` in the inbox, so it
    must run in the fresh conversation (#2), not in the one ``/new`` just closed."""
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None
        new = await gw.submit(inbound("e1", "/new"))
        hello = await gw.submit(inbound("e2", "hello after new"))
        assert new.message_id is not None and hello.message_id is not None
        assert new.message_id < hello.message_id  # the inbox order: /new first
        await wait_until(
            lambda: any("fake answer to: hello after new" in t for t in surface.texts()),
            20,
            "the answer to the message sent after /new",
        )
        assert any("fresh conversation (#2)" in t for t in surface.texts()), surface.texts()
        (run,) = starts(fake_dir)
        assert run["conversation"] == conversation_name(KEY, 2), (
            f"the message sent after /new ran in {run['conversation']!r}: the old conversation"
        )


def database(env: dict[str, str]) -> Path:
    return Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"


async def test_messages_queued_before_a_restart_all_run_after_it(
    env: dict[str, str], fake_dir: Path
) -> None:
    """Three messages of one conversation were admitted (one waiting for the gateway's only
    run slot, two queued behind it: within the bound of 2). A graceful stop leaves them
    accepted, "the next start runs it"; the next start must run all three, not refuse the
    third as a queue overflow."""
    env["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "1"
    env["JAZZ_BRIDGE_LIMITS__MAX_QUEUED_PER_CONVERSATION"] = "2"
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None
        await gw.submit(inbound("a1", "hold forever", thread="plain:a"))
        await wait_until(lambda: len(starts(fake_dir)) == 1, 20, "the first run to start")
        for i in (1, 2, 3):
            await gw.submit(inbound(f"b{i}", f"message b{i}", thread="plain:b"))
        await wait_until(
            lambda: any("limit; yours starts" in t for t in surface.texts()), 20, "waiting notice"
        )
        assert not any("not queued" in t for t in surface.texts()), surface.texts()
        assert len(await app.store.messages_in_state(InboxState.ACCEPTED)) == 3  # type: ignore[union-attr]
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface

        def answered() -> list[str]:
            return [t for t in surface.texts() if t.startswith("fake answer to: message b")]

        try:
            await wait_until(lambda: len(answered()) == 3, 15, "b1, b2 and b3 answered")
        except AssertionError:
            refused = [t for t in surface.texts() if "not queued" in t]
            raise AssertionError(
                f"after the restart only {len(answered())} of the 3 admitted messages ran; "
                f"refused: {refused}"
            ) from None


async def test_a_notice_the_store_refuses_does_not_cost_the_message_its_run(
    env: dict[str, str], fake_dir: Path
) -> None:
    """A real store error (not "unavailable": a constraint failure, as SQLite raises for a
    refused write) hits the "waiting for a run slot" notice written before a message's run.
    The notice is a status line: the acknowledged message must still run and be answered
    (it was taken off its queue and left "accepted" until some later restart)."""
    env["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "1"
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None and app.store is not None
        db = sqlite3.connect(database(env), isolation_level=None)
        try:
            db.execute(
                "CREATE TRIGGER refuse_waiting BEFORE INSERT ON replies"
                " WHEN NEW.dedupe_key LIKE 'waiting:%'"
                " BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            )
            await gw.submit(inbound("a1", "hold one", thread="plain:a"))
            await wait_until(lambda: len(starts(fake_dir)) == 1, 20, "the first run to start")
            b = await gw.submit(inbound("b1", "message b1", thread="plain:b"))
            assert b.message_id is not None
            record = await app.store.get_message(b.message_id)
            assert record is not None
            slot = gw._slots[record.conversation_id]
            await wait_until(lambda: slot.told, 20, "b1 to wait for the run slot")
            (fake_dir / "release-one").touch()
            await wait_until(
                lambda: any(t.startswith("fake answer to: message b1") for t in surface.texts()),
                20,
                "b1 run and answered without its notice",
            )
            assert not any("yours starts" in t for t in surface.texts())  # it was refused
        finally:
            db.close()


async def test_idle_conversations_do_not_keep_their_last_run_in_memory(
    env: dict[str, str], fake_dir: Path
) -> None:
    """Every conversation that ever ran keeps a slot in the engine holding its last run's
    handle (with the whole envelope: the answer) until its next run, which may never come:
    the engine's memory grows with every conversation it has served."""
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None
        n = 4
        for i in range(n):
            await gw.submit(inbound(f"c{i}", f"question {i}", thread=f"plain:c{i}"))
        await wait_until(
            lambda: sum(t.startswith("fake answer to: question") for t in surface.texts()) == n,
            30,
            "every conversation answered",
        )
        await wait_until(
            lambda: gw.conversations_in_memory == 0 and not gw.deliverer.conversations_in_order,
            20,
            "every conversation forgotten once idle",
        )


async def test_stop_sent_while_the_run_waits_for_a_slot_stops_it_as_it_starts(
    env: dict[str, str], fake_dir: Path
) -> None:
    """A message waits for the gateway's only run slot (it has left its queue, its run has
    not begun): a /stop then stops that run as it starts, instead of "Nothing is running"
    and the run going ahead. Its runner is not started at all: started and then stopped, a
    fast runner could answer first (under load it did)."""
    env["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "1"
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None
        await gw.submit(inbound("a1", "hold one", thread="plain:a"))
        await wait_until(lambda: len(starts(fake_dir)) == 1, 20, "the first run to start")
        await gw.submit(inbound("b1", "message b1", thread="plain:b"))
        await wait_until(
            lambda: any("limit; yours starts" in t for t in surface.texts()), 20, "b1 waiting"
        )
        await gw.submit(inbound("b2", "/stop", thread="plain:b"))
        await wait_until(
            lambda: any(t.startswith("⏹️ Stopped: the run that was about") for t in surface.texts()),
            20,
            "the /stop answered",
        )
        (fake_dir / "release-one").touch()
        await wait_until(
            lambda: any(t.startswith("⏹️ Stopped by u1") for t in surface.texts()),
            20,
            "b1's run stopped as it started",
        )
        assert not any(t.startswith("fake answer to: message b1") for t in surface.texts())
        assert len(starts(fake_dir)) == 1  # b1's runner never started: nothing to race


async def test_a_typed_secret_the_gateway_stopped_before_passing_on_is_not_run(
    env: dict[str, str], fake_dir: Path
) -> None:
    """The gateway stopped (a crash) with a run waiting on a secret and the person's typed
    answer accepted but not yet passed on. At the next start that run is over: the answer
    must not run as a new message (the secret would go to the agent as its prompt); it is
    redacted and the person told."""
    async with running_gateway(env, {"plain": plain_surface.SPEC}):
        pass  # the root and its store
    store = SqliteStore(database(env))
    await store.open()
    try:
        home = naming.home_name(KEY)
        ask, _ = await store.accept(inbound("q1", "log in for me"), home=home, is_command=False)
        run = await store.begin_run(ask.id, "u1")
        assert run is not None
        await store.add_prompts(
            [
                PromptRecord(
                    token="SeCrEtPrOmPtToKeN",
                    run_id=run.id,
                    conversation_id=ask.conversation_id,
                    requester="u1",
                    kind="secret",
                    request_id="r1",
                    created_at=time.time(),
                )
            ]
        )
        typed, _ = await store.accept(inbound("q2", "hunter2-pass"), home=home, is_command=False)
    finally:
        await store.close()
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        await wait_until(
            lambda: any("ended when the gateway restarted" in t for t in surface.texts()),
            20,
            "the typed answer told its question ended",
        )
        assert app.store is not None
        record = await app.store.get_message(typed.id)
        assert record is not None and record.state is InboxState.DONE
        assert record.text == "[redacted]"
    assert not starts(fake_dir)  # nothing ran: not the interrupted run, not the secret
