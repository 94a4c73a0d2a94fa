"""Review: a later part of an album answered without a run must not leave its conversation
in the engine's memory for good.

The part is closed silently (its album's first part was refused or taken as an answer); the
engine made the conversation a slot for it and never dropped it, since only a worker or a
command forgets a slot: every such conversation stayed in memory (``conversations_in_memory``)
for as long as the gateway ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import plain_surface
import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway, wait_until
from gateway_harness import run_starts as starts

from bridge.model import Inbound, InboxState

KEY = "plain:album"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    e["JAZZ_BRIDGE_ISOLATION"] = "off"
    e["JAZZ_BRIDGE_LIMITS__MAX_QUEUED_PER_CONVERSATION"] = "0"
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


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
