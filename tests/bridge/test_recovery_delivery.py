"""Recovery delivers replies that were recorded but never sent, once, and only once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import plain_surface
import pytest
from conftest import remove_accounts
from gateway_harness import gateway_env, running_gateway, wait_until

from bridge.model import Inbound, InboxState, Outgoing, ReplyKind, ReplyState, ReplyTarget
from bridge.store import NewReply, SqliteStore
from provisioning import naming


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


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


async def test_an_operator_may_stop_someone_elses_run(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_WEB__OPERATORS"] = '["oscar"]'
    async with running_gateway(env) as (_, client):
        await client.post("op", "hold OP1")
        await wait_until(lambda: len(client.starts("web:op")) == 1, what="OP1 started")
        await client.post("op", "/stop", user="oscar")
        errors = await client.wait_role("op", "error")
        assert "Stopped by oscar" in errors[0]["text"]


async def test_web_chat_beyond_loopback_needs_a_token(env: dict[str, str]) -> None:
    from bridge.errors import AdapterError

    env["JAZZ_BRIDGE_SERVER__HOST"] = "0.0.0.0"
    with pytest.raises(AdapterError, match=r"web\.token"):
        async with running_gateway(env):
            pass
