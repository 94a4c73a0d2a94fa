"""The store contract, retention: a prune never deletes what is still owed, nor what a kept
record needs to read right (the replies of a message a kept run holds: without them the
message would read as never answered, and recovery would answer it again)."""

from __future__ import annotations

import time

from store_support import inbound

from bridge.model import InboxState, Outgoing, ReplyKind, ReplyState, ReplyTarget
from bridge.store import NewReply, PromptRecord, RunOutcome, Store
from provisioning import naming

KEY = "plain:room"


async def test_prune_keeps_the_replies_of_a_message_it_keeps(store: Store) -> None:
    """A run kept by a prompt left pending keeps its message, and so its replies: a kept
    message with none would read as never answered, and recovery would answer it again."""
    msg, _ = await store.accept(
        inbound("e1", platform="plain", thread_key=KEY, text="hi"),
        home=naming.home_name(KEY),
        is_command=False,
    )
    run = await store.start_run(msg.id, "u", 1)
    await store.add_prompts(
        [PromptRecord("tok", run.id, msg.conversation_id, "u", "approval", "t1")]
    )
    target = ReplyTarget(surface="plain", thread_key=KEY)
    reply = NewReply(
        f"error:{msg.id}", msg.conversation_id, Outgoing(ReplyKind.ERROR, "no"), target, msg.id
    )
    outcome = RunOutcome(ok=False, exit_code=3, envelope_code=None)
    [rec] = await store.finish_run(run.id, outcome, InboxState.FAILED, [reply])
    await store.mark_reply(rec.id, ReplyState.SENT, platform_ref="r")
    await store.prune(time.time() + 3600)
    assert await store.get_message(msg.id) is not None
    assert await store.get_reply(rec.id) is not None
    assert await store.unanswered_messages() == []
