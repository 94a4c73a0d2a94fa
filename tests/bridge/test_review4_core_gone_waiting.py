"""Review: a chat that blocked the bot while its message waited for a run slot.

The gateway at its ``limits.max_concurrent_runs``: a person's message waits for a run slot
(taken off its conversation's queue, "yours starts as soon as one finishes"); meanwhile the
chat is found to take no more of the bot's messages (a ChatGone). What the chat still had
queued was closed without running, but the message waiting for its slot still ran, paid
for, its answer given up unsent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import plain_surface
import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway, wait_until
from gateway_harness import run_starts as starts

from bridge.model import Inbound, InboxState, Outgoing, ReplyTarget
from bridge.ports import AdapterContext, AdapterSpec, ChatGone

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


SPEC = AdapterSpec(
    "plain", "plain", plain_surface.PlainSettings, BlockingAdapter, lambda s: bool(s.enabled)
)


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    e["JAZZ_BRIDGE_ISOLATION"] = "off"
    e["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "1"
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def inbound(event_id: str, thread: str, text: str) -> Inbound:
    return Inbound(
        platform="plain", event_id=event_id, thread_key=thread, sender_id="u1", text=text
    )


async def test_a_message_waiting_for_a_run_slot_is_not_run_once_its_chat_is_gone(
    env: dict[str, str], fake_dir: Path
) -> None:
    async with running_gateway(env, {"plain": SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        assert isinstance(surface, BlockingSurface)
        gw = app.engine
        assert gw is not None and app.store is not None
        await gw.submit(inbound("o1", "plain:other", "hold other"))
        await wait_until(lambda: len(starts(fake_dir)) == 1, 20, "the other chat's run")
        # the person blocks the bot just after writing: the "waiting for a run slot" notice
        # is refused for good
        surface.blocked = True
        waiting = await gw.submit(inbound("b1", BLOCKED, "answer me later"))
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
