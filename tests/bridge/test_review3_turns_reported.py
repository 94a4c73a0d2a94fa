"""Review: what people hit around commands and queueing, mended in the turn engine.

Before the fix:

* ``/new what is 2+2``: the fresh conversation started, and the question was dropped
  without a word (the command's argument was parsed, and never used).
* ``yes`` typed to an approval shown with buttons: it was queued behind the run that waits
  for that very person, who was told "the agent is still working on an earlier message".
* ``/status`` while the conversation's message waits for a run slot (the gateway's global
  cap): "Idle: nothing is running", "Waiting: 0", as if the message was lost.
* A message sent while the previous queued one runs was queued with no word: the "queued"
  notice was given once per worker, not once per burst (``told`` was reset only when the
  conversation's worker ended, not when its queue emptied, as ``ConversationSlot`` says).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import plain_surface
import pytest
from accounts_support import remove_accounts
from gateway_harness import Client, gateway_env, running_gateway, wait_until

from bridge.engine import conversation_name
from bridge.model import Inbound


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    e["JAZZ_BRIDGE_ISOLATION"] = "off"
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def inbound(event_id: str, text: str, thread: str) -> Inbound:
    return Inbound(
        platform="plain", event_id=event_id, thread_key=thread, sender_id="u1", text=text
    )


def texts(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("text") or "") for m in messages]


async def test_the_text_after_new_runs_in_the_fresh_conversation(env: dict[str, str]) -> None:
    """The next message is the fence: one conversation runs its messages in order, so once
    it is answered the question sent with ``/new`` has run, or never will."""
    async with running_gateway(env) as (_app, client):
        await client.post("fresh", "/new what is 2+2")
        await client.post("fresh", "the next message")
        await client.wait_role("fresh", "assistant")
        prompts = [(r["conversation"], r["prompt"]) for r in client.starts("web:fresh")]
        assert (conversation_name("web:fresh", 2), "what is 2+2") in prompts, (
            f"'/new what is 2+2' started conversation #2 and the question never ran; the "
            f"runs were {prompts}; the thread read {texts(await client.messages('fresh'))}"
        )


async def _approval_shown(client: Client, thread: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    async def shown() -> bool:
        nonlocal found
        found = [m for m in await client.messages(thread) if m["role"] == "prompt"]
        found = [m for m in found if m.get("choices")]
        return bool(found)

    await wait_until(shown, 20, "the approval with its buttons")
    return found[0]


async def _first_notice(client: Client, thread: str) -> str:
    """The first status line the thread got (not a live progress bubble)."""
    found: list[str] = []

    async def told() -> bool:
        nonlocal found
        found = [
            str(m["text"])
            for m in await client.messages(thread)
            if m["role"] == "status" and not m.get("live")
        ]
        return bool(found)

    await wait_until(told, 20, "a status line answering the typed reply")
    return found[0]


async def test_a_reply_typed_to_an_approval_with_buttons_is_told_to_use_them(
    env: dict[str, str],
) -> None:
    async with running_gateway(env) as (_app, client):
        await client.post("ask", "approve please")
        prompt = await _approval_shown(client, "ask")
        await client.post("ask", "yes")
        told = await _first_notice(client, "ask")
        try:
            assert "button" in told.lower() or "answer" in told.lower(), (
                f"'yes' typed to the approval (buttons shown) was answered {told!r} while "
                "the run waits for this very person to press a button"
            )
        finally:  # the run ends now, not at the gateway's stop
            await client.press("ask", prompt["choices"][0]["token"], "ada")


async def test_status_counts_the_message_waiting_for_a_run_slot(
    env: dict[str, str], fake_dir: Path
) -> None:
    env["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "1"
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, client):
        surface = plain_surface.INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None
        await gw.submit(inbound("a1", "hold slot", "plain:a"))
        await wait_until(lambda: bool(client.starts("plain:a")), 20, "the run holding the slot")
        await gw.submit(inbound("b1", "message b1", "plain:b"))
        await wait_until(
            lambda: any("yours starts" in t for t in surface.texts()), 20, "b1 waiting its turn"
        )
        await gw.submit(inbound("b2", "/status", "plain:b"))
        await wait_until(
            lambda: any("Waiting:" in t for t in surface.texts()), 20, "the answer to /status"
        )
        (fake_dir / "release-slot").touch()
        (status,) = [t for t in surface.texts() if "Waiting:" in t]
        assert "Idle" not in status and "Waiting: 0" not in status, (
            f"b1 waits for a run slot, and /status in its conversation said:\n{status}"
        )


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
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, client):
        surface = plain_surface.INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None
        thread = "plain:burst"
        await gw.submit(inbound("m1", "hold m1", thread))
        await wait_until(lambda: len(client.starts(thread)) == 1, 20, "m1 running")
        await gw.submit(inbound("m2", "hold m2", thread))
        await wait_until(lambda: any("Queued" in t for t in surface.texts()), 20, "m2 queued")
        (fake_dir / "release-m1").touch()
        await wait_until(lambda: len(client.starts(thread)) == 2, 20, "m2 running")
        m3 = await gw.submit(inbound("m3", "third message", thread))
        assert m3.message_id is not None
        await gw.submit(inbound("m4", "/status", thread))
        await wait_until(
            lambda: any("Waiting:" in t for t in surface.texts()), 20, "the answer to /status"
        )
        (fake_dir / "release-m2").touch()
        assert queued_notice_of(env, m3.message_id), (
            f"m3 was queued behind m2's run with no word; the thread got {surface.texts()}"
        )
