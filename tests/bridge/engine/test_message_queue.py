"""The conversation queue counts an album once, however its parts leave it."""

from __future__ import annotations

import itertools

from bridge.engine.message_queue import MessageQueue, album_key
from bridge.model import InboxState
from bridge.store import MessageRecord

_ids = itertools.count(1)


def msg(sender: str = "U1", part_of: str | None = None) -> MessageRecord:
    return MessageRecord(
        id=next(_ids),
        conversation_id=1,
        platform="telegram",
        event_id=f"e{next(_ids)}",
        thread_key="telegram:1",
        sender_id=sender,
        sender_name=None,
        text="",
        attachments=[],
        shared_chat=False,
        is_operator=False,
        is_command=False,
        target={},
        state=InboxState.ACCEPTED,
        received_at=0.0,
        started_at=None,
        finished_at=None,
        error=None,
        part_of=part_of,
    )


def test_an_albums_parts_count_as_one_message_waiting() -> None:
    q = MessageQueue()
    whole = msg()
    a1, a2, a3 = msg(part_of="A"), msg(part_of="A"), msg(part_of="A")
    other_sender = msg("U2", part_of="A")  # the same album id from someone else: another
    for m in (whole, a1, a2, other_sender, a3):
        q.append(m)
    assert (len(q), q.waiting) == (5, 3)
    assert q.holds_album(("U1", "A")) and q.holds_album(("U2", "A"))
    assert q.popleft() is whole and q.waiting == 2
    assert q.popleft() is a1 and (len(q), q.waiting) == (3, 2)  # a2, a3 still one message
    assert q.take_album(("U1", "A")) == [a2, a3]
    assert list(q) == [other_sender] and q.waiting == 1
    assert not q.holds_album(("U1", "A")) and q.take_album(("U1", "A")) == []
    assert q.popleft() is other_sender and (len(q), q.waiting, bool(q)) == (0, 0, False)


def test_taking_an_album_keeps_the_order_of_the_rest() -> None:
    q = MessageQueue()
    items = [msg(part_of="A"), msg(), msg(part_of="B"), msg(part_of="A"), msg()]
    for m in items:
        q.append(m)
    assert q.waiting == 4
    assert q.take_album(album_key(items[0]) or ("", "")) == [items[0], items[3]]
    assert list(q) == [items[1], items[2], items[4]] and q.waiting == 3
