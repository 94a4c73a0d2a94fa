"""A conversation's queue and the gateway's run slots: what waits is told so (once per
burst, with what it waits for), what does not fit is refused, a waiting notice the store
refuses costs the message nothing, a chat gone while its message waits runs nothing, and an
idle conversation leaves nothing in the engine's memory.

The real gateway in process, the web chat or the tests' plain surface (a platform with no
buttons), the fake runner as a real subprocess; every wait is bounded.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import plain_surface
from gateway_harness import run_starts as starts
from gateway_harness import running_gateway, use_reference_runner, wait_until

from bridge.model import Inbound, InboxState, Outgoing, ReplyTarget
from bridge.ports import AdapterContext, AdapterSpec, ChatGone

KEY = "plain:room"


def inbound(event_id: str, text: str, *, thread: str = KEY, user: str = "u1") -> Inbound:
    return Inbound(
        platform="plain", event_id=event_id, thread_key=thread, sender_id=user, text=text
    )


def database(env: dict[str, str]) -> Path:
    return Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"


async def test_queue_overflow_gets_a_clear_reply(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_LIMITS__MAX_QUEUED_PER_CONVERSATION"] = "2"
    async with running_gateway(env) as (_, client):
        await client.post("q", "hold Q1")
        await wait_until(lambda: len(client.starts("web:q")) == 1, what="Q1 started")
        for i in range(3):
            await client.post("q", f"queued {i}")
        overflow = await client.wait_role("q", "status", 3)
        assert any("not queued" in m["text"] for m in overflow)
        client.release("Q1")
        await client.wait_role("q", "assistant", 3)
        prompts = [s["prompt"] for s in client.starts("web:q")]
        assert prompts == ["hold Q1", "queued 0", "queued 1"]


async def test_the_global_cap_tells_who_waits(env: dict[str, str], fake_dir: Path) -> None:
    use_reference_runner(env, fake_dir)
    env["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "1"
    async with running_gateway(env) as (_, client):
        await client.post("a", "!delay 2")
        await client.wait_role("a", "status")  # A holds the only slot (its progress shows)
        await client.post("b", "hello")
        waiting = await client.wait_role("b", "status")
        assert "its limit" in waiting[0]["text"]
        await client.wait_role("b", "assistant", timeout=30)


async def test_a_notice_the_store_refuses_does_not_cost_the_message_its_run(
    env: dict[str, str], fake_dir: Path
) -> None:
    """A real store error (not "unavailable": a constraint failure, as SQLite raises for a
    refused write) hits the "waiting for a run slot" notice written before a message's run.
    The notice is a status line: the acknowledged message must still run and be answered
    (it was taken off its queue and left "accepted" until some later restart)."""
    env["JAZZ_BRIDGE_ISOLATION"] = "off"  # one account for every conversation
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


def queued_notice_of(env: dict[str, str], message_id: int) -> bool:
    """Whether the store holds a "queued" notice for ``message_id``."""
    db = sqlite3.connect(Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db")
    try:
        row = db.execute(
            "SELECT 1 FROM replies WHERE dedupe_key = ?", (f"queued:{message_id}",)
        ).fetchone()
    finally:
        db.close()
    return row is not None


async def test_a_message_queued_after_the_queue_emptied_is_told_it_waits(
    env: dict[str, str], fake_dir: Path
) -> None:
    """m1 runs, m2 waits (told "queued"), m2 runs, then m3 is sent: the queue had emptied,
    so m3 starts a new burst and is told it waits. The store's one writer takes the notice
    (spawned as m3 is queued) before the answer to the /status sent after it: once that
    answer is out, the notice is in the store or was never made."""
    env["JAZZ_BRIDGE_ISOLATION"] = "off"  # one account for every conversation
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, client):
        surface = plain_surface.INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None
        thread = "plain:burst"
        await gw.submit(inbound("m1", "hold m1", thread=thread))
        await wait_until(lambda: len(client.starts(thread)) == 1, 20, "m1 running")
        await gw.submit(inbound("m2", "hold m2", thread=thread))
        await wait_until(lambda: any("Queued" in t for t in surface.texts()), 20, "m2 queued")
        (fake_dir / "release-m1").touch()
        await wait_until(lambda: len(client.starts(thread)) == 2, 20, "m2 running")
        m3 = await gw.submit(inbound("m3", "third message", thread=thread))
        assert m3.message_id is not None
        await gw.submit(inbound("m4", "/status", thread=thread))
        await wait_until(
            lambda: any("Waiting:" in t for t in surface.texts()), 20, "the answer to /status"
        )
        (fake_dir / "release-m2").touch()
        assert queued_notice_of(env, m3.message_id), (
            f"m3 was queued behind m2's run with no word; the thread got {surface.texts()}"
        )


async def test_idle_conversations_do_not_keep_their_last_run_in_memory(
    env: dict[str, str], fake_dir: Path
) -> None:
    """Every conversation that ever ran keeps a slot in the engine holding its last run's
    handle (with the whole envelope: the answer) until its next run, which may never come:
    the engine's memory grows with every conversation it has served."""
    env["JAZZ_BRIDGE_ISOLATION"] = "off"  # one account for every conversation
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


BLOCKED = "plain:blocked"


class BlockingSurface(plain_surface.PlainSurface):
    """A platform on which the chat ``BLOCKED`` blocks the bot once ``blocked`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.blocked = False
        self.refused: list[str] = []

    async def send(self, target: ReplyTarget, message: Outgoing, *, reply_key: str) -> str:
        if target.thread_key == BLOCKED and self.blocked:
            self.refused.append(message.text)
            raise ChatGone("Forbidden: bot was blocked by the user")
        return await super().send(target, message, reply_key=reply_key)


class BlockingAdapter(plain_surface.PlainAdapter):
    def __init__(self, ctx: AdapterContext) -> None:
        super().__init__(ctx)
        self.surface = BlockingSurface()


BLOCKING_SPEC = AdapterSpec(
    "plain", "plain", plain_surface.PlainSettings, BlockingAdapter, lambda s: bool(s.enabled)
)


async def test_a_message_waiting_for_a_run_slot_is_not_run_once_its_chat_is_gone(
    env: dict[str, str], fake_dir: Path
) -> None:
    """The gateway at its ``limits.max_concurrent_runs``: a person's message waits for a run
    slot (taken off its conversation's queue, "yours starts as soon as one finishes");
    meanwhile the chat is found to take no more of the bot's messages (a ChatGone). What
    the chat still had queued was closed without running, but the message waiting for its
    slot still ran, paid for, its answer given up unsent."""
    env["JAZZ_BRIDGE_ISOLATION"] = "off"  # one account for every conversation
    env["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "1"
    async with running_gateway(env, {"plain": BLOCKING_SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        assert isinstance(surface, BlockingSurface)
        gw = app.engine
        assert gw is not None and app.store is not None
        await gw.submit(inbound("o1", "hold other", thread="plain:other"))
        await wait_until(lambda: len(starts(fake_dir)) == 1, 20, "the other chat's run")
        # the person blocks the bot just after writing: the "waiting for a run slot" notice
        # is refused for good
        surface.blocked = True
        waiting = await gw.submit(inbound("b1", "answer me later", thread=BLOCKED))
        await wait_until(
            lambda: any("limit; yours starts" in t for t in surface.refused),
            20,
            "the waiting notice refused",
        )
        await wait_until(lambda: bool(gw.deliverer._gone), 20, "the chat known to be gone")
        (fake_dir / "release-other").touch()

        async def closed() -> bool:
            msg = await app.store.get_message(waiting.message_id or 0)
            return msg is not None and msg.state not in (InboxState.ACCEPTED, InboxState.RUNNING)

        await wait_until(closed, 20, "the blocked chat's message closed")
        prompts = [s["prompt"] for s in starts(fake_dir)]
        assert "answer me later" not in prompts, (
            "the message of a chat known to take no more messages was run (paid for) once a "
            "run slot came free"
        )
        msg = await app.store.get_message(waiting.message_id or 0)
        assert msg is not None and msg.state is InboxState.FAILED
