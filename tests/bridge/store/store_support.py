"""What the store's tests share: the :class:`Backend` a contract test runs on (the conftest
makes one per backend), and builders of an inbound message and a reply, with defaults
that make a valid one (a Slack thread), each field overridable."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from bridge.model import Inbound, Outgoing, ReplyKind, ReplyTarget
from bridge.store import NewReply, Store


@dataclass(frozen=True)
class Backend:
    """One backend under test, on a database of this test's own."""

    name: str
    make: Callable[[], Store]
    """A new, unopened store on the test's database (opening another makes a second handle
    on the same data, as the next start of the gateway would)."""
    count: Callable[[str], int]
    """Rows in one of the store's tables (``inbox``, ``replies``...), read past the store
    (another connection): what a second process sees."""
    set_last_active: Callable[[str, float], None]
    """Set a conversation's last activity (by thread key) by hand, past the store."""


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
