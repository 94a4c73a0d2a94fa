"""Review: the daily cost cap must hold for a message that waited for a run slot.

A message that waits for one of ``limits.max_concurrent_runs`` (a busy gateway) was checked
against the cap before it waited, never after: a run that finished meanwhile and took the
day's spend over the cap (or left it unknown) did not stop it, so every conversation
waiting for a slot ran once more, each paid for, after the cap was reached.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import plain_surface
import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, install_fake_runner, running_gateway, wait_until
from gateway_harness import run_starts as starts

from bridge.model import Inbound, InboxState

LIMIT_TEXT = "Today's spending limit for this gateway is reached"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    e.update(install_fake_runner(fake_dir, provider="openai"))  # its runs are unpriced
    e["JAZZ_BRIDGE_ISOLATION"] = "off"
    e["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "1"
    e["JAZZ_BRIDGE_LIMITS__DAILY_COST_USD"] = "100"
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def inbound(event_id: str, thread: str, text: str) -> Inbound:
    return Inbound(
        platform="plain", event_id=event_id, thread_key=thread, sender_id="u1", text=text
    )


async def test_a_message_that_waited_for_a_run_slot_is_refused_once_the_cap_is_reached(
    env: dict[str, str], fake_dir: Path
) -> None:
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None and app.store is not None
        # the fake runner reports no price: once it ends, today's spend is unknown (the
        # cap closes the gateway until midnight UTC, as the README says)
        await gw.submit(inbound("a1", "plain:a", "hold a"))
        await wait_until(lambda: len(starts(fake_dir)) == 1, 20, "the first run")
        waiting = await gw.submit(inbound("b1", "plain:b", "hello from b"))
        await wait_until(
            lambda: any("limit; yours starts" in t for t in surface.texts()),
            20,
            "b told it waits for a run slot",
        )
        (fake_dir / "release-a").touch()

        async def b_closed() -> bool:
            msg = await app.store.get_message(waiting.message_id or 0)
            return msg is not None and msg.state not in (InboxState.ACCEPTED, InboxState.RUNNING)

        await wait_until(b_closed, 20, "b answered")
        await wait_until(
            lambda: any(LIMIT_TEXT in t or "hello from b" in t for t in surface.texts()),
            20,
            "b's reply",
        )
        prompts = [s["prompt"] for s in starts(fake_dir)]
        assert "hello from b" not in prompts, (
            "a message run after the day's spend had become unknown (cap reached): "
            f"{surface.texts()}"
        )
        assert any(LIMIT_TEXT in t for t in surface.texts()), surface.texts()
