"""Builders the store's tests share: an inbound message and a reply, with defaults that
make a valid one (a Slack thread), each field overridable."""

from __future__ import annotations

import time

from bridge.model import Inbound, Outgoing, ReplyKind, ReplyTarget
from bridge.store import NewReply


def inbound(
    event_id: str = "ev1",
    *,
    platform: str = "slack",
    thread_key: str = "slack:T1:C1:1.0",
    text: str = "hello",
    target: dict[str, object] | None = None,
    received_at: float | None = None,
    **kw: object,
) -> Inbound:
    return Inbound(
        platform=platform,
        event_id=event_id,
        thread_key=thread_key,
        sender_id="U1",
        text=text,
        target=target if target is not None else {"channel": "C1", "thread_ts": "1.0"},
        received_at=received_at if received_at is not None else time.time(),
        **kw,  # type: ignore[arg-type]
    )


def reply(
    key: str,
    conversation_id: int,
    *,
    kind: ReplyKind = ReplyKind.ANSWER,
    text: str = "answer",
    message_id: int | None = None,
    **kw: object,
) -> NewReply:
    return NewReply(
        dedupe_key=key,
        conversation_id=conversation_id,
        outgoing=Outgoing(kind=kind, text=text, **kw),  # type: ignore[arg-type]
        target=ReplyTarget(surface="slack", thread_key="slack:T1:C1:1.0", context={"c": "C1"}),
        message_id=message_id,
    )
