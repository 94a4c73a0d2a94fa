"""A public Telegram chat's links (``t.me/<username>/<message>``) find its conversation.

Those links carry the chat's @username, not its id, and the gateway kept only the id: every
such link an operator pasted found nothing. The Telegram adapter now keeps the username of
a public chat in the conversation's reply context, and links are matched on it; a real
message from the fake Bot API shows the adapter stores it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bridge.model import Inbound
from bridge.operators import Operators
from bridge.store import SqliteStore
from provisioning import naming
from provisioning.layout import Layout

CHAT = -1009876543210  # the public supergroup @JazzFans: its General topic and topic 7
OTHER = -1001111111111  # another public group, @jazz (a prefix of the first's name)
CONVERSATIONS: dict[str, dict[str, Any]] = {
    f"telegram:{CHAT}": {"chat_id": CHAT, "message_id": 5, "chat_username": "jazzfans"},
    f"telegram:{CHAT}:7": {
        "chat_id": CHAT,
        "message_id": 50,
        "thread_id": 7,
        "chat_username": "jazzfans",
    },
    f"telegram:{OTHER}": {"chat_id": OTHER, "message_id": 9, "chat_username": "jazz"},
}


@pytest.fixture
async def ops(tmp_path: Path) -> AsyncIterator[Operators]:
    store = SqliteStore(tmp_path / "state" / "bridge.db")
    await store.open()
    try:
        for i, (key, target) in enumerate(CONVERSATIONS.items()):
            inbound = Inbound(
                platform="telegram",
                event_id=f"e{i}",
                thread_key=key,
                sender_id="u",
                text="hi",
                target=target,
            )
            await store.accept(inbound, home=naming.home_name(key), is_command=False)
        yield Operators(store, Layout(tmp_path), False)
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("link", "key"),
    [
        ("https://t.me/JazzFans/123", f"telegram:{CHAT}"),
        ("https://t.me/jazzfans/7/123", f"telegram:{CHAT}:7"),
        ("https://t.me/JazzFans/123?thread=7", f"telegram:{CHAT}:7"),
        ("https://t.me/jazz/4", f"telegram:{OTHER}"),
    ],
)
async def test_a_public_chat_link_finds_its_conversation(
    ops: Operators, link: str, key: str
) -> None:
    conv = await ops.find(link)
    assert conv is not None and conv.thread_key == key, (link, conv)


def test_the_adapter_keeps_a_public_chat_username() -> None:
    """What the adapter gives the core for a message in a public group."""
    from telegram import Message

    from adapters.telegram import convert

    raw = {
        "message_id": 3,
        "date": 1764669600,
        "chat": {"id": CHAT, "type": "supergroup", "title": "Fans", "username": "JazzFans"},
        "from": {"id": 42, "is_bot": False, "first_name": "Ada"},
        "text": "@jazz_example_bot hello",
        "entities": [{"type": "mention", "offset": 0, "length": 17}],
    }
    rules = convert.Rules(
        bot_id=999,
        bot_username="jazz_example_bot",
        allowed_chats=frozenset(),
        allowed_users=frozenset(),
        allow_everyone=True,
        operators=frozenset(),
        group_trigger="mention",
    )
    message = Message.de_json(raw, None)
    assert message is not None
    inbound = convert.to_inbound(10, message, rules)
    assert isinstance(inbound, Inbound), inbound
    assert inbound.target.get("chat_username") == "jazzfans", inbound.target
