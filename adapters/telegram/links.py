"""Telegram links an operator pastes (``t.me/c/<chat>/<message>``, a public chat's
``t.me/<name>/<message>``): which conversation they name.

The core asks through :class:`~bridge.ports.LinkReader` (``jazz-bridge homes show <link>``,
the /ops search). A link carries what Telegram shows, which is not always the key the
conversation has: a group moved to a supergroup keeps its first chat id in its key, and a
public chat's links name its @username; :func:`aliases` gives those keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

from bridge.ports import LinkPatterns, LinkReader

TELEGRAM_HOSTS = ("t.me", "telegram.me", "www.t.me", "www.telegram.me")


def telegram_patterns(path: str, query: str) -> LinkPatterns | None:
    """The thread keys a t.me message link may name (see ``LinkPatterns``)."""
    parts = [p for p in path.split("/") if p]
    topic = parse_qs(query).get("thread", [""])[0]
    if len(parts) >= 3 and parts[0] == "c" and parts[1].isdigit():
        chat = f"-100{parts[1]}"
        if len(parts) >= 4:  # /c/<chat>/<topic>/<message>
            return LinkPatterns("telegram", (f"telegram:{chat}:{parts[2]}",))
        if topic.isdigit():  # /c/<chat>/<message>?thread=<topic>
            return LinkPatterns("telegram", (f"telegram:{chat}:{topic}", f"telegram:{chat}"))
        # /c/<chat>/<message>: the topic it opened, else the chat's own conversation, else
        # its one topic
        return LinkPatterns(
            "telegram",
            (f"telegram:{chat}", f"telegram:{chat}:*"),
            first=(f"telegram:{chat}:{parts[2]}",),
        )
    if len(parts) >= 2:  # a public chat's link: its @username, not its id (username_key)
        chat = f"@{parts[0].lower()}"
        if len(parts) >= 3:  # /<name>/<topic>/<message>
            return LinkPatterns("telegram", (f"telegram:{chat}:{parts[1]}",))
        if topic.isdigit():
            return LinkPatterns("telegram", (f"telegram:{chat}:{topic}", f"telegram:{chat}"))
        return LinkPatterns(
            "telegram",
            (f"telegram:{chat}", f"telegram:{chat}:*"),
            first=(f"telegram:{chat}:{parts[1]}",),
        )
    return None


def moved_key(thread_key: str, target: Mapping[str, Any]) -> str | None:
    """A Telegram group upgraded to a supergroup keeps the conversation keyed on its first
    chat id, while its messages (and so its links) carry the new one: the key it would
    have under the chat id of its latest message, when that differs."""
    chat = target.get("chat_id")
    if not isinstance(chat, int):
        return None
    _platform, _, rest = thread_key.partition(":")
    first, sep, topic = rest.partition(":")
    if first == str(chat):
        return None
    return f"telegram:{chat}{sep}{topic}"


def username_key(thread_key: str, target: Mapping[str, Any]) -> str | None:
    """A public Telegram chat's links name it by its @username, not its id: the key the
    conversation has under the username its latest message came with."""
    name = target.get("chat_username")
    if not isinstance(name, str) or not name:
        return None
    _platform, _, rest = thread_key.partition(":")
    _first, sep, topic = rest.partition(":")
    return f"telegram:@{name}{sep}{topic}"


def aliases(thread_key: str, target: Mapping[str, Any]) -> tuple[str | None, ...]:
    """The conversation's keys as links name it: a moved chat's, then a public chat's."""
    return (moved_key(thread_key, target), username_key(thread_key, target))


LINKS = LinkReader(hosts=TELEGRAM_HOSTS, patterns=telegram_patterns, aliases=aliases)
