"""The store contract, prompts: recorded, resolved once (of two concurrent answers exactly one
wins), expired per run or all at once, and listed while pending, oldest first."""

from __future__ import annotations

import asyncio

from store_support import inbound

from bridge.store import PromptRecord, Store


async def test_prompts_resolve_once_and_expire(store: Store) -> None:
    m1, _ = await store.accept(inbound("ev1"), home="h", is_command=False)
    m2, _ = await store.accept(inbound("ev2"), home="h", is_command=False)
    cid = m1.conversation_id
    r1 = await store.start_run(m1.id, "U1", 1)
    r2 = await store.start_run(m2.id, "U1", 1)

    def prompt(token: str, run_id: int) -> PromptRecord:
        return PromptRecord(
            token=token,
            run_id=run_id,
            conversation_id=cid,
            requester="U1",
            kind="approval",
            request_id=f"call-{token}",
            payload={"tool": "bash"},
        )

    await store.add_prompts([prompt("t1", r1.id), prompt("t2", r1.id), prompt("t3", r2.id)])
    got = await store.get_prompt("t1")
    assert got is not None and got.state == "pending" and got.payload == {"tool": "bash"}
    assert got.created_at > 0
    assert [p.token for p in await store.pending_prompts(cid)] == ["t1", "t2", "t3"]
    assert [p.token for p in await store.pending_prompts(None)] == ["t1", "t2", "t3"]

    first, second = await asyncio.gather(
        store.resolve_prompt("t1", {"approved": True}),
        store.resolve_prompt("t1", {"approved": False}),
    )
    assert (first, second) == (True, False)
    answered = await store.get_prompt("t1")
    assert answered is not None
    assert answered.state == "answered" and answered.answer == {"approved": True}
    assert answered.answered_at is not None
    assert not await store.resolve_prompt("nope", {})

    assert await store.expire_prompts(r1.id) == 1  # t2; t1 was answered
    assert [p.token for p in await store.pending_prompts(cid)] == ["t3"]
    assert not await store.resolve_prompt("t2", {"approved": True})
    assert await store.expire_prompts(None) == 1
    assert await store.pending_prompts(cid) == []
    assert await store.get_prompt("missing") is None
