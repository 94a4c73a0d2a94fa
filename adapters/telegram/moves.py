"""Groups upgraded to supergroups keep their conversation.

Telegram gives a group a new chat id when it becomes a supergroup (an admin changes a
setting, the group grows): it posts a service message with ``migrate_to_chat_id`` in the
old chat and one with ``migrate_from_chat_id`` in the new one, and every later message
comes from the new id. The thread key is made from the chat id, so without this the next
message started a new conversation in a new home: the agent forgot the history, and the
files stayed behind in the old home.

A move is remembered as new id -> the chat id the conversation was first keyed on (a chat
moved twice still maps to its first id), persisted in the store's key-value table as one
small JSON map (moves are rare; the map is read once at start), and written before the
service message is acknowledged, so no later message of the chat can miss it. Replies go
to the new id (the conversation's target follows its latest message; the surface also
follows a ``ChatMigrated`` refusal itself).
"""

from __future__ import annotations

import json
import logging

from bridge.store import Store

log = logging.getLogger(__name__)

MAX_MOVES = 100_000  # more groups upgraded than this on one bot: the oldest are forgotten


class ChatMoves:
    """New chat id -> the id its conversations are keyed on."""

    def __init__(self, store: Store, key: str) -> None:
        self._store = store
        self._key = key
        self._first: dict[int, int] = {}

    async def load(self) -> None:
        raw = await self._store.get_kv(self._key)
        if not raw:
            return
        try:
            data = json.loads(raw)
            self._first = {int(new): int(old) for new, old in data.items()}
        except (ValueError, TypeError, AttributeError) as exc:
            log.error(
                "telegram: the stored map of upgraded groups (%s) is unreadable (%s); "
                "groups upgraded before now start new conversations",
                self._key,
                exc,
            )
            self._first = {}

    def keyed_on(self, chat_id: int) -> int:
        """The chat id a chat's conversations are keyed on (its own unless it moved)."""
        return self._first.get(chat_id, chat_id)

    async def note(self, old: int, new: int) -> None:
        """Remember that chat ``old`` is now ``new`` (durably, before returning)."""
        first = self.keyed_on(old)
        if new == first or self._first.get(new) == first:
            return
        moved = dict(self._first)
        moved[new] = first
        while len(moved) > MAX_MOVES:
            moved.pop(next(iter(moved)))
        await self._store.set_kv(self._key, json.dumps({str(k): v for k, v in moved.items()}))
        self._first = moved
        log.info("telegram: chat %d is now %d; its conversations continue there", old, new)
