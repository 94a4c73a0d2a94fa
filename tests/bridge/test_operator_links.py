"""Links an operator pastes (``homes list/show``, ``bridge/operators.py``) find the
conversation they point at, or say none (or several) do.

The operator has a link from the person who complains: Telegram's "Copy link" of a forum
topic or of a message in one, a group that Telegram upgraded to a supergroup (its links
carry the new id, its conversation is keyed on the first), a public chat's
``t.me/<username>/<message>``, Slack's browser address of a thread, a link pasted without
its ``https://``, or a path from a log line (a file inside a home, the tarball of an
archived one). Each must find its own conversation, never another.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bridge.model import Inbound
from bridge.operators import Operators
from bridge.store import SqliteStore
from provisioning import naming
from provisioning.layout import Layout

FORUM = "-1001234567890"  # a forum supergroup: its General topic and two topics

UPGRADED_OLD, UPGRADED_NEW = "-4242", "-1005555555555"  # a group upgraded to a supergroup

SLACK_THREAD = "slack:T0TEAM:C0CHAN:1764669600.000100"


CONVERSATIONS: dict[str, dict[str, Any]] = {
    f"telegram:{FORUM}": {"chat_id": int(FORUM), "message_id": 5},
    f"telegram:{FORUM}:12": {"chat_id": int(FORUM), "message_id": 50, "thread_id": 12},
    f"telegram:{FORUM}:99": {"chat_id": int(FORUM), "message_id": 60, "thread_id": 99},
    # keyed on the group's first id; its later messages (and replies) use the new one
    f"telegram:{UPGRADED_OLD}": {"chat_id": int(UPGRADED_NEW), "message_id": 7},
    SLACK_THREAD: {"team": "T0TEAM", "channel": "C0CHAN", "thread_ts": "1764669600.000100"},
    "slack:T0TEAM:D0DMCHAN": {"team": "T0TEAM", "channel": "D0DMCHAN", "thread_ts": None},
}


@pytest.fixture
async def ops(tmp_path: Path) -> AsyncIterator[Operators]:
    store = SqliteStore(tmp_path / "state" / "bridge.db")
    await store.open()
    try:
        for i, (key, target) in enumerate(CONVERSATIONS.items()):
            await store.accept(
                Inbound(
                    platform=key.split(":")[0],
                    event_id=f"e{i}",
                    thread_key=key,
                    sender_id="u",
                    text="hi",
                    target=target,
                ),
                home=naming.home_name(key),
                is_command=False,
            )
        yield Operators(store, Layout(tmp_path), False)
    finally:
        await store.close()


async def _found(ops: Operators, ref: str) -> str | None:
    conv = await ops.find(ref)
    return conv.thread_key if conv else None


@pytest.mark.parametrize(
    ("link", "wanted"),
    [
        # "Copy link" of a topic: t.me/c/<chat>/<topic id> (its first message's id)
        (f"https://t.me/c/{FORUM[4:]}/12", f"telegram:{FORUM}:12"),
        # a message of a topic in the ?thread= form
        (f"https://t.me/c/{FORUM[4:]}/345?thread=99", f"telegram:{FORUM}:99"),
        # ... and in the path form, and a General topic message: still theirs
        (f"https://t.me/c/{FORUM[4:]}/12/345", f"telegram:{FORUM}:12"),
        (f"https://t.me/c/{FORUM[4:]}/346", f"telegram:{FORUM}"),
    ],
)
async def test_a_topic_link_finds_the_topic_not_the_general_chat(
    ops: Operators, link: str, wanted: str
) -> None:
    assert await _found(ops, link) == wanted


async def test_a_link_into_an_upgraded_group_finds_its_conversation(ops: Operators) -> None:
    link = f"https://t.me/c/{UPGRADED_NEW[4:]}/8"
    assert await _found(ops, link) == f"telegram:{UPGRADED_OLD}"


@pytest.mark.parametrize(
    ("link", "wanted"),
    [
        # the browser's address of a thread in Slack's web client
        (
            "https://app.slack.com/client/T0TEAM/C0CHAN/thread/C0CHAN-1764669600.000100",
            SLACK_THREAD,
        ),
        ("https://app.slack.com/client/T0TEAM/D0DMCHAN", "slack:T0TEAM:D0DMCHAN"),
        # pasted without the scheme
        ("acme.slack.com/archives/C0CHAN/p1764669600000100", SLACK_THREAD),
        (f"t.me/c/{FORUM[4:]}/12/345", f"telegram:{FORUM}:12"),
    ],
)
async def test_other_forms_of_a_link_find_their_conversation(
    ops: Operators, link: str, wanted: str
) -> None:
    assert await _found(ops, link) == wanted


async def test_a_path_inside_a_home_or_its_tarball_finds_the_conversation(
    ops: Operators, tmp_path: Path
) -> None:
    home = naming.home_name(SLACK_THREAD)
    inside = tmp_path / "chats" / home / "workspace" / "report.pdf"
    tarball = tmp_path / "archive" / f"{home}.tar.gz"
    assert await _found(ops, str(inside)) == SLACK_THREAD
    assert await _found(ops, str(tarball)) == SLACK_THREAD
    assert await _found(ops, str(tmp_path / "chats" / "no-such-home")) is None


async def test_a_link_that_fits_several_conversations_says_so(tmp_path: Path) -> None:
    """A forum link without a topic, the bot in two topics and not in General: the
    operator was told "no conversation matches" although two do; they are named."""
    root = tmp_path / "root"
    store = SqliteStore(root / "state" / "bridge.db")
    await store.open()
    try:
        for i, topic in enumerate((12, 99)):
            key = f"telegram:{FORUM}:{topic}"
            await store.accept(
                Inbound(
                    platform="telegram",
                    event_id=f"e{i}",
                    thread_key=key,
                    sender_id="u",
                    text="hi",
                    target={"chat_id": int(FORUM), "thread_id": topic},
                ),
                home=naming.home_name(key),
                is_command=False,
            )
    finally:
        await store.close()
    shown = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "homes", "show", f"https://t.me/c/{FORUM[4:]}/500"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "JAZZ_BRIDGE_ROOT": str(root)},
    )
    assert shown.returncode == 2, shown.stdout + shown.stderr
    assert "no conversation matches" not in shown.stderr, shown.stderr
    assert f"telegram:{FORUM}:12" in shown.stderr and f"telegram:{FORUM}:99" in shown.stderr


# -- a public chat's links -------------------------------------------------------------------


CHAT = -1009876543210  # the public supergroup @JazzFans: its General topic and topic 7

OTHER = -1001111111111  # another public group, @jazz (a prefix of the first's name)


PUBLIC_CHATS: dict[str, dict[str, Any]] = {
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
async def public_ops(tmp_path: Path) -> AsyncIterator[Operators]:
    store = SqliteStore(tmp_path / "state" / "bridge.db")
    await store.open()
    try:
        for i, (key, target) in enumerate(PUBLIC_CHATS.items()):
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
    public_ops: Operators, link: str, key: str
) -> None:
    """Those links carry the chat's @username, not its id, and the gateway kept only the
    id: every such link an operator pasted found nothing. The Telegram adapter now keeps
    the username of a public chat in the conversation's reply context, and links are
    matched on it."""
    conv = await public_ops.find(link)
    assert conv is not None and conv.thread_key == key, (link, conv)


def test_the_adapter_keeps_a_public_chat_username() -> None:
    """What the adapter gives the core for a message in a public group."""
    from telegram import Message

    from adapters.telegram.inbound import Rules, to_inbound

    raw = {
        "message_id": 3,
        "date": 1764669600,
        "chat": {"id": CHAT, "type": "supergroup", "title": "Fans", "username": "JazzFans"},
        "from": {"id": 42, "is_bot": False, "first_name": "Ada"},
        "text": "@jazz_example_bot hello",
        "entities": [{"type": "mention", "offset": 0, "length": 17}],
    }
    rules = Rules(
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
    inbound = to_inbound(10, message, rules)
    assert isinstance(inbound, Inbound), inbound
    assert inbound.target.get("chat_username") == "jazzfans", inbound.target
