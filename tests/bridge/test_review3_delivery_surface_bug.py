"""A surface that raises something no one expected (a bug of its own, not a platform's
answer) gives up that one reply and lets the conversation's later replies through.

Before, only ``DeliveryError``, ``OSError`` and ``TimeoutError`` were caught: any other
exception escaped the deliverer, the reply stayed ``pending`` and every later reply of the
conversation, queued behind it, was never sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.engine.delivery import Deliverer
from bridge.metrics import Metrics
from bridge.model import Inbound, Outgoing, ReplyKind, ReplyState, ReplyTarget
from bridge.ports import Capabilities
from bridge.store import NewReply, SqliteStore


class BuggySurface:
    """Its renderer chokes on one reply's text (as a surface bug would, every time)."""

    name = "buggy"

    def __init__(self) -> None:
        self.capabilities = Capabilities()
        self.landed: list[str] = []

    async def send(self, target: ReplyTarget, message: Outgoing, *, reply_key: str) -> str:
        if "choke" in message.text:
            raise ValueError("the renderer choked")
        self.landed.append(message.text)
        return f"ref-{len(self.landed)}"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "bridge.db")
    await s.open()
    yield s
    await s.close()


async def test_a_surface_bug_fails_one_reply_and_the_next_still_goes(store: SqliteStore) -> None:
    inbound = Inbound(
        platform="buggy", event_id="e1", thread_key="buggy:t", sender_id="u", text="hi"
    )
    msg, _ = await store.accept(inbound, home="buggy-t", is_command=False)
    target = ReplyTarget(surface="buggy", thread_key="buggy:t", context={})
    first, second = await store.add_replies(
        [
            NewReply(
                "answer:1:0", msg.conversation_id, Outgoing(ReplyKind.ANSWER, "choke"), target
            ),
            NewReply("answer:1:1", msg.conversation_id, Outgoing(ReplyKind.ANSWER, "fine"), target),
        ]
    )
    surface = BuggySurface()
    deliverer = Deliverer(store, {"buggy": surface}, Metrics(), lambda _: None)
    missed = await deliverer.deliver([first, second])
    assert missed == {first.id}
    assert surface.landed == ["fine"], "the reply after the one the surface choked on"
    failed = await store.get_reply(first.id)
    assert failed is not None and failed.state is ReplyState.FAILED
    assert failed.last_error is not None and "renderer choked" in failed.last_error
