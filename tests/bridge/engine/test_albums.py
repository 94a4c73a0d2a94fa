"""Albums (a platform's several parts of one message, Telegram's media groups): the engine
takes an album whole, and refuses it whole. An album refused at its first part (over the
queue limit) has its later parts closed silently: live, without keeping the conversation in
memory for good, and after a crash that came between the refusal and a later part's close.

The engine's album logic is platform-neutral (Telegram is the platform that sends parts):
the real gateway in process with the tests' plain surface or the web chat (used only to
read the transcript), the fake runner as a real subprocess; every wait is bounded.
"""

from __future__ import annotations

from pathlib import Path

import plain_surface
from gateway_harness import run_starts as starts
from gateway_harness import running_gateway, wait_until

from bridge.model import Inbound, InboxState, Outgoing, ReplyKind, ReplyTarget
from bridge.store import NewReply, SqliteStore
from provisioning import naming

KEY = "plain:album"


def inbound(event_id: str, text: str, part_of: str | None = None) -> Inbound:
    return Inbound(
        platform="plain",
        event_id=event_id,
        thread_key=KEY,
        sender_id="u1",
        text=text,
        part_of=part_of,
    )


async def test_a_closed_album_part_leaves_no_conversation_in_memory(
    env: dict[str, str], fake_dir: Path
) -> None:
    """A later part of an album answered without a run does not leave its conversation
    in the engine's memory for good.

    The part is closed silently (its album's first part was refused or taken as an answer); the
    engine made the conversation a slot for it and never dropped it, since only a worker or a
    command forgets a slot: every such conversation stayed in memory (``conversations_in_memory``)
    for as long as the gateway ran."""
    env["JAZZ_BRIDGE_ISOLATION"] = "off"  # one account for every conversation
    env["JAZZ_BRIDGE_LIMITS__MAX_QUEUED_PER_CONVERSATION"] = "0"
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None and app.store is not None
        await gw.submit(inbound("m1", "hold one"))
        await wait_until(lambda: len(starts(fake_dir)) == 1, 20, "the run")
        # an album's first part, over the queue limit: refused for the whole album
        await gw.submit(inbound("p1", "photo one", part_of="album-1"))
        await wait_until(
            lambda: any("not queued" in t for t in surface.texts()), 20, "the album refused"
        )
        (fake_dir / "release-one").touch()
        await wait_until(
            lambda: any("fake answer to: hold one" in t for t in surface.texts()), 20, "answer"
        )
        await wait_until(lambda: gw.conversations_in_memory == 0, 20, "the conversation idle")
        # the album's second part comes in late: closed without a word, as the first was
        late = await gw.submit(inbound("p2", "photo two", part_of="album-1"))

        async def closed() -> bool:
            msg = await app.store.get_message(late.message_id or 0)
            return msg is not None and msg.state is InboxState.MERGED

        await wait_until(closed, 20, "the late part closed")
        await wait_until(
            lambda: gw.conversations_in_memory == 0,
            5,
            "the conversation forgotten again after its late album part was closed",
        )


def _part(event_id: str, text: str) -> Inbound:
    return Inbound(
        platform="web",
        event_id=event_id,
        thread_key="web:al",
        sender_id="ada",
        sender_name="ada",
        text=text,
        target={"thread": "al"},
        part_of="album-1",
    )


async def test_the_rest_of_an_album_refused_before_a_crash_is_not_run(env: dict[str, str]) -> None:
    """An album refused whole (over the queue limit) before a crash has its remaining parts run
    as a turn after the restart.

    The live gateway answers an album's first part "not queued, send it again" and closes the
    album's later parts silently (``Engine._closed_albums``, in memory only). A crash after the
    refusal was written and before a later part was closed (accepted, not yet ``merged``)
    leaves that part ``accepted``; the restarted gateway has forgotten the refusal and runs the
    part on its own: the person, told to send the album again, gets an answer to a fragment
    of it (and the fragment runs a second time when they resend)."""
    async with running_gateway(env):  # creates the root and the database
        pass
    db = Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"
    home = naming.home_name("web:al")
    store = SqliteStore(db)
    await store.open()
    try:
        first, _ = await store.accept(
            _part("p1", "caption of the album"), home=home, is_command=False
        )
        second, _ = await store.accept(_part("p2", "second photo"), home=home, is_command=False)
        # the live gateway refused the album at its first part (the queue was full) ...
        refusal = NewReply(
            f"overflow:{first.id}",
            first.conversation_id,
            Outgoing(ReplyKind.NOTICE, "⏸️ ... This one was not queued: send it again ..."),
            ReplyTarget(surface="web", thread_key="web:al", context={"thread": "al"}),
            first.id,
        )
        await store.complete_message(first.id, InboxState.FAILED, [refusal])
        # ... and was killed before it closed the second part (still accepted)
    finally:
        await store.close()

    async with running_gateway(env) as (app, client):
        assert app.store is not None

        async def second_settled() -> bool:
            msg = await app.store.get_message(second.id)  # type: ignore[union-attr]
            return (
                msg is not None
                and msg.state is not InboxState.ACCEPTED
                and (msg.state is not InboxState.RUNNING)
            )

        await wait_until(second_settled, 20, "the album's second part to be dealt with")
        settled = await app.store.get_message(second.id)
        ran = [s["prompt"] for s in client.starts("web:al")]
        assert ran == [], f"a part of an album refused whole ran after the restart: {ran}"
        assert settled is not None and settled.state is InboxState.MERGED, settled
