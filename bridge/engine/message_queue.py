"""A conversation's queue of messages waiting for their turn, albums counted once.

A platform may deliver one message in parts (a Telegram album: one update per photo, see
``Inbound.part_of``); the parts wait in the queue one entry each until the engine joins them
into one run. People count messages, not entries: the queue limit, "number N in line" and
``/status`` must see an album of ten photos as one message, and the engine must find an
album's queued parts without walking a queue that can hold thousands of entries after a
restart. So the queue keeps, beside its entries, how many of each album it holds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from ..store import MessageRecord

AlbumKey = tuple[str, str]  # (sender_id, part_of): one sender's message delivered in parts


def album_key(msg: MessageRecord) -> AlbumKey | None:
    """The album ``msg`` is a part of, or None for a whole message."""
    return None if msg.part_of is None else (msg.sender_id, msg.part_of)


class MessageQueue:
    """FIFO of accepted messages; ``len`` counts entries, :attr:`waiting` counts messages."""

    def __init__(self) -> None:
        self._items: deque[MessageRecord] = deque()
        self._albums: dict[AlbumKey, int] = {}  # entries queued per album
        self._extra = 0  # entries that are a further part of an album already queued

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __iter__(self) -> Iterator[MessageRecord]:
        return iter(self._items)

    @property
    def waiting(self) -> int:
        """Messages waiting, an album's parts counted as one."""
        return len(self._items) - self._extra

    def holds_album(self, key: AlbumKey) -> bool:
        return key in self._albums

    def append(self, msg: MessageRecord) -> None:
        self._items.append(msg)
        key = album_key(msg)
        if key is not None:
            held = self._albums.get(key, 0)
            self._extra += held > 0
            self._albums[key] = held + 1

    def popleft(self) -> MessageRecord:
        msg = self._items.popleft()
        self._forget(msg)
        return msg

    def drain(self) -> list[MessageRecord]:
        """Remove and return every entry, in queue order."""
        taken = list(self._items)
        self._items.clear()
        self._albums.clear()
        self._extra = 0
        return taken

    def take_album(self, key: AlbumKey) -> list[MessageRecord]:
        """Remove and return every queued part of ``key``'s album, in queue order."""
        if key not in self._albums:
            return []
        taken = [m for m in self._items if album_key(m) == key]
        self._items = deque(m for m in self._items if album_key(m) != key)
        self._extra -= len(taken) - 1
        del self._albums[key]
        return taken

    def _forget(self, msg: MessageRecord) -> None:
        key = album_key(msg)
        if key is None:
            return
        left = self._albums[key] - 1
        if left:
            self._albums[key] = left
            self._extra -= 1
        else:
            del self._albums[key]
