"""Recovery delivers replies that were recorded but never sent, once, and only once."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

import plain_surface
import pytest
from gateway_harness import running_gateway, use_reference_runner, wait_until

from bridge.model import Inbound, InboxState, Outgoing, ReplyKind, ReplyState, ReplyTarget
from bridge.store import NewReply, SqliteStore
from provisioning import naming


async def test_undelivered_replies_are_sent_at_start_exactly_once(env: dict[str, str]) -> None:
    # first start creates the root and the database
    async with running_gateway(env, {"plain": plain_surface.SPEC}):
        pass
    db = Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"
    store = SqliteStore(db)
    await store.open()
    key = "plain:room"
    msg, _ = await store.accept(
        Inbound(platform="plain", event_id="e1", thread_key=key, sender_id="u", text="hi"),
        home=naming.home_name(key),
        is_command=False,
    )
    run = await store.start_run(msg.id, "u", 1)
    from bridge.store import RunOutcome

    target = ReplyTarget(surface="plain", thread_key=key)
    parts = [
        NewReply(
            f"answer:{msg.id}:{i}",
            msg.conversation_id,
            Outgoing(ReplyKind.ANSWER, f"part {i}"),
            target,
            msg.id,
        )
        for i in range(3)
    ]
    records = await store.finish_run(
        run.id, RunOutcome(ok=True, exit_code=0, envelope_code=None), InboxState.DONE, parts
    )
    await store.mark_reply(records[0].id, ReplyState.SENT, platform_ref="already")  # sent before
    await store.close()  # the gateway "died" after recording, before delivering parts 1 and 2

    async with running_gateway(env, {"plain": plain_surface.SPEC}):
        surface = plain_surface.INSTANCES[-1].surface
        await wait_until(lambda: len(surface.texts()) >= 2, 15, "recovered replies")
        assert surface.texts() == ["part 1", "part 2"]  # in order, part 0 not again
    async with running_gateway(env, {"plain": plain_surface.SPEC}):
        surface = plain_surface.INSTANCES[-1].surface
        assert surface.texts() == []
    store = SqliteStore(db)
    await store.open()
    try:
        assert await store.undelivered_replies() == []
    finally:
        await store.close()


@pytest.fixture
def platform() -> plain_surface.Platform:
    plain_surface.PLATFORM = plain_surface.Platform()  # a fresh platform per test
    return plain_surface.PLATFORM


CONFIRM = {"confirm": plain_surface.CONFIRM_SPEC}


async def _submit(text: str, event_id: str) -> None:
    gateway = plain_surface.CONFIRMING[-1].ctx.gateway
    await gateway.submit(
        Inbound(
            platform="confirm",
            event_id=event_id,
            thread_key="confirm:room",
            sender_id="u",
            text=text,
        )
    )


async def test_a_reply_that_landed_before_a_crash_is_not_sent_again(
    env: dict[str, str], platform: plain_surface.Platform
) -> None:
    platform.hang_after_landing = ("answer:",)
    async with running_gateway(env, CONFIRM):
        await _submit("hello", "e1")
        await asyncio.wait_for(platform.hanging.wait(), 20)
    # the gateway "died" after the platform took the answer, before marking it sent
    db = Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"
    store = SqliteStore(db)
    await store.open()
    try:
        (answer,) = [
            r for r in await store.undelivered_replies() if r.dedupe_key.startswith("answer:")
        ]
        # and one more reply recorded but never posted: recovery must still send that one
        late = NewReply(
            "late:1", answer.conversation_id, Outgoing(ReplyKind.NOTICE, "late"), answer.target
        )
        (late_rec,) = await store.add_replies([late])
    finally:
        await store.close()
    assert platform.posts == [answer.dedupe_key]

    platform.hang_after_landing = ()
    async with running_gateway(env, CONFIRM) as (app, _client):
        surface = plain_surface.CONFIRMING[-1].surface
        await wait_until(lambda: surface.texts() == ["late"], 15, "the late reply")

        async def settled() -> bool:  # both marks written (the last one with a later write)
            recs = [await app.store.get_reply(r) for r in (answer.id, late_rec.id)]
            return all(r is not None and r.state is ReplyState.SENT for r in recs)

        await wait_until(settled, 15, "the answer and the late reply marked sent")
        rec = await app.store.get_reply(answer.id)
        assert rec is not None and rec.platform_ref == platform.landed[answer.dedupe_key]
    assert platform.posts == [answer.dedupe_key, "late:1"]  # the answer exactly once
    assert answer.dedupe_key in platform.lookups and "late:1" in platform.lookups


async def test_a_retry_after_a_lost_platform_answer_looks_before_sending(
    env: dict[str, str], platform: plain_surface.Platform
) -> None:
    platform.fail_after_landing = ("answer:",)
    async with running_gateway(env, CONFIRM) as (app, _client):
        await _submit("hello", "e2")
        await wait_until(lambda: len(platform.lookups) == 1, 20, "a lookup before the retry")

        async def sent() -> bool:
            return not [r for r in await app.store.undelivered_replies()]

        await wait_until(sent, 15, "every reply marked sent")
    answers = [k for k in platform.posts if k.startswith("answer:")]
    assert len(answers) == 1 and platform.lookups == answers


async def test_an_artifact_left_undelivered_is_sent_from_the_home_after_a_restart(
    env: dict[str, str], fake_dir: Path
) -> None:
    use_reference_runner(env, fake_dir)
    plain = {"plain": plain_surface.SPEC}
    key = "plain:art"
    async with running_gateway(env, plain) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        assert app.engine is not None
        await app.engine.submit(
            Inbound(
                platform="plain",
                event_id="a1",
                thread_key=key,
                sender_id="u",
                text="!artifact plot.png",
            )
        )
        made = "The agent made `plot.png`"
        await wait_until(lambda: any(made in t for t in surface.texts()), 20, "the artifact")
    # the gateway "died" after recording the artifact reply, before delivering it
    db = Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        reset = conn.execute(
            "UPDATE replies SET state = 'pending' WHERE dedupe_key LIKE 'artifact:%'"
        ).rowcount
    assert reset == 1
    async with running_gateway(env, plain):
        surface = plain_surface.INSTANCES[-1].surface
        await wait_until(lambda: len(surface.texts()) >= 1, 20, "the recovered artifact")
        (text,) = surface.texts()
        assert text.startswith("The agent made `plot.png`"), text  # not "not sent: no home"


async def test_the_gateway_listens_while_interrupted_notices_wait_for_the_platform(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs cut off by a crash are answered "interrupted" at start, in the background: a
    platform that is down at start must not keep intake down while the notices retry."""
    async with running_gateway(env, {"plain": plain_surface.SPEC}):
        pass
    db = Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"
    store = SqliteStore(db)
    await store.open()
    for i in range(2):  # two runs in flight when the gateway died
        key = f"plain:cut{i}"
        msg, _ = await store.accept(
            Inbound(platform="plain", event_id=f"c{i}", thread_key=key, sender_id="u", text="x"),
            home=naming.home_name(key),
            is_command=False,
        )
        assert await store.begin_run(msg.id, "u") is not None
    await store.close()
    monkeypatch.setattr(plain_surface, "UNREACHABLE_AT_START", True)
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (_, client):
        surface = plain_surface.INSTANCES[-1].surface
        # listening (start returned) while the platform is still down: nothing sent yet
        assert surface.texts() == []
        async with client.session.get(f"{client.base}/readyz") as resp:
            assert resp.status == 200
        surface.unreachable = False  # the platform is back: the notices go out
        await wait_until(lambda: len(surface.texts()) >= 2, 20, "both interrupted notices")
        assert all("interrupted" in t for t in surface.texts())
