"""Commands in a conversation: answered at once, in the inbox's order, while a run goes
on. ``/new`` starts a fresh conversation (the text after it is its first message, and what
is sent after it runs there); ``/status`` counts a message waiting for a run slot.

The real gateway in process, the web chat or the tests' plain surface, the fake runner as
a real subprocess; every wait is bounded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plain_surface
from gateway_harness import run_starts as starts
from gateway_harness import running_gateway, wait_until

from bridge.engine import conversation_name
from bridge.model import Inbound

KEY = "plain:room"


def inbound(event_id: str, text: str, *, thread: str = KEY, user: str = "u1") -> Inbound:
    return Inbound(
        platform="plain", event_id=event_id, thread_key=thread, sender_id=user, text=text
    )


def texts(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("text") or "") for m in messages]


async def test_commands_are_answered_at_once(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("c", "hold C1")
        await wait_until(lambda: len(client.starts("web:c")) == 1, what="C1 started")
        await client.post("c", "/status")
        status = await client.wait_role("c", "status")
        assert any("Running" in m["text"] for m in status)
        await client.post("c", "/new")
        await client.wait_role("c", "status", 2)
        client.release("C1")
        await client.wait_role("c", "assistant")
        await client.post("c", "after new")
        await client.wait_role("c", "assistant", 2)
        convs = [s["conversation"] for s in client.starts("web:c")]
        assert convs == [conversation_name("web:c", 1), conversation_name("web:c", 2)]
        await client.post("c", "/frobnicate is not a command")
        await client.wait_role("c", "assistant", 3)
        assert client.starts("web:c")[-1]["prompt"] == "/frobnicate is not a command"


async def test_a_message_sent_after_new_runs_in_the_new_conversation(
    env: dict[str, str], fake_dir: Path
) -> None:
    """``/new`` then a message, handed in one after the other (as Telegram's polling hands in
    a batch, or two quick webhooks): the message comes after ``/new`` in the inbox, so it
    must run in the fresh conversation (#2), not in the one ``/new`` just closed."""
    env["JAZZ_BRIDGE_ISOLATION"] = "off"  # one account for every conversation
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


async def test_the_text_after_new_runs_in_the_fresh_conversation(env: dict[str, str]) -> None:
    """The next message is the fence: one conversation runs its messages in order, so once
    it is answered the question sent with ``/new`` has run, or never will."""
    env["JAZZ_BRIDGE_ISOLATION"] = "off"  # one account for every conversation
    async with running_gateway(env) as (_app, client):
        await client.post("fresh", "/new what is 2+2")
        await client.post("fresh", "the next message")
        await client.wait_role("fresh", "assistant")
        prompts = [(r["conversation"], r["prompt"]) for r in client.starts("web:fresh")]
        assert (conversation_name("web:fresh", 2), "what is 2+2") in prompts, (
            f"'/new what is 2+2' started conversation #2 and the question never ran; the "
            f"runs were {prompts}; the thread read {texts(await client.messages('fresh'))}"
        )


async def test_status_counts_the_message_waiting_for_a_run_slot(
    env: dict[str, str], fake_dir: Path
) -> None:
    env["JAZZ_BRIDGE_ISOLATION"] = "off"  # one account for every conversation
    env["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "1"
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, client):
        surface = plain_surface.INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None
        await gw.submit(inbound("a1", "hold slot", thread="plain:a"))
        await wait_until(lambda: bool(client.starts("plain:a")), 20, "the run holding the slot")
        await gw.submit(inbound("b1", "message b1", thread="plain:b"))
        await wait_until(
            lambda: any("yours starts" in t for t in surface.texts()), 20, "b1 waiting its turn"
        )
        await gw.submit(inbound("b2", "/status", thread="plain:b"))
        await wait_until(
            lambda: any("Waiting:" in t for t in surface.texts()), 20, "the answer to /status"
        )
        (fake_dir / "release-slot").touch()
        (status,) = [t for t in surface.texts() if "Waiting:" in t]
        assert "Idle" not in status and "Waiting: 0" not in status, (
            f"b1 waits for a run slot, and /status in its conversation said:\n{status}"
        )
