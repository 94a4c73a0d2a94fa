"""What a restart runs again: every message admitted before a stop runs after it (none
refused as an overflow), and a ``/stop`` left by a crash stops nothing it was not meant for.

The crash is a store seeded as a kill -9 leaves it, or a graceful stop of the real gateway
in process; the fake runner runs as a real subprocess; every wait is bounded.
"""

from __future__ import annotations

from pathlib import Path

import plain_surface
from gateway_harness import run_starts as starts
from gateway_harness import running_gateway, wait_until

from bridge.model import Inbound, InboxState
from bridge.store import SqliteStore
from provisioning import naming


def plain(event_id: str, text: str, thread: str) -> Inbound:
    return Inbound(
        platform="plain", event_id=event_id, thread_key=thread, sender_id="u1", text=text
    )


async def test_messages_queued_before_a_restart_all_run_after_it(
    env: dict[str, str], fake_dir: Path
) -> None:
    """Three messages of one conversation were admitted (one waiting for the gateway's only
    run slot, two queued behind it: within the bound of 2). A graceful stop leaves them
    accepted, "the next start runs it"; the next start must run all three, not refuse the
    third as a queue overflow."""
    env["JAZZ_BRIDGE_ISOLATION"] = "off"  # one account for every conversation
    env["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "1"
    env["JAZZ_BRIDGE_LIMITS__MAX_QUEUED_PER_CONVERSATION"] = "2"
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None
        await gw.submit(plain("a1", "hold forever", "plain:a"))
        await wait_until(lambda: len(starts(fake_dir)) == 1, 20, "the first run to start")
        for i in (1, 2, 3):
            await gw.submit(plain(f"b{i}", f"message b{i}", "plain:b"))
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


def _inbound(event_id: str, text: str) -> Inbound:
    return Inbound(
        platform="web",
        event_id=event_id,
        thread_key="web:st",
        sender_id="ada",
        sender_name="ada",
        text=text,
        target={"thread": "st"},
    )


async def test_a_stop_left_by_a_crash_does_not_stop_the_next_message(env: dict[str, str]) -> None:
    """A ``/stop`` persisted just before a crash stopped, after the restart, a message it was
    never meant for.

    Before the crash: ada's first message is running, her second waits behind it, and she
    sends ``/stop`` (for the run she sees working). The ``/stop`` is accepted (acknowledged)
    and the gateway is killed before it is answered. At the restart the running message is
    answered "interrupted, send again" (right), the second message is requeued and taken off
    its queue first, and the requeued ``/stop`` then found it as the run "about to start" and
    stopped it as it started: the second message, which the person never asked to stop and
    which the live gateway would have run after the stopped one, was answered "Stopped"."""
    async with running_gateway(env):  # creates the root and the database
        pass
    db = Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"
    home = naming.home_name("web:st")
    store = SqliteStore(db)
    await store.open()
    try:
        first, _ = await store.accept(_inbound("e1", "first question"), home=home, is_command=False)
        assert await store.begin_run(first.id, "ada") is not None  # running at the crash
        second, _ = await store.accept(
            _inbound("e2", "hold m2 second"), home=home, is_command=False
        )
        stop, _ = await store.accept(_inbound("e3", "/stop"), home=home, is_command=True)
    finally:
        await store.close()

    async with running_gateway(env) as (_, client):

        async def second_answered() -> bool:
            if client.starts("web:st"):
                client.release("m2")  # the second message's run may finish
            msgs = await client.messages("st")
            return any(
                m.get("messageId") == second.id and m["role"] in ("assistant", "error")
                for m in msgs  # the live progress bubble has no message id
            )

        await wait_until(second_answered, 30, "the second message to be answered")
        msgs = await client.messages("st")
        outcome = [
            (m["role"], m["text"])
            for m in msgs
            if m["messageId"] == second.id and m["role"] != "user"
        ]
        stop_answer = [m["text"] for m in msgs if m["messageId"] == stop.id and m["role"] != "user"]
        assert [role for role, _ in outcome] == ["assistant"], (
            f"the message queued behind the interrupted run was not run: {outcome}; "
            f"the requeued /stop answered {stop_answer}"
        )
