"""The web chat's surface: the core's replies kept for the page and streamed to it.

What the core sends (answers, progress bubbles, prompts with buttons, files) has nowhere
to go but this process: each reply is published as an event to the thread's open event
streams (:mod:`.streams`) and to the replay log a reconnected stream resumes from
(:mod:`.replay`); a progress bubble, which the store does not keep, is held here for
``GET .../messages`` (:mod:`.api`), and so is the thread of each button shown, so that a
press is taken only in the thread that showed it. A file a person sent with a message is
handed to the core from where it waited for the turn (:mod:`.uploads`).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import Any

from bridge.model import Attachment, Outgoing, ReplyKind, ReplyTarget
from bridge.ports import Capabilities, DeliveryError

from .replay import EventLog
from .uploads import StagedUploads

ROLE_BY_KIND = {
    ReplyKind.ANSWER: "assistant",
    ReplyKind.ARTIFACT: "assistant",
    ReplyKind.NOTICE: "status",
    ReplyKind.ERROR: "error",
    ReplyKind.PROMPT: "prompt",
}
# events waiting for one stream to write them; a stream that falls this far behind (its
# client stopped reading) is ended after them, and its client resumes from the last it got
MAX_STREAM_BACKLOG = 1000
LAGGING = "lagging"  # the end of a stream's backlog (never sent): the stream closes there
MAX_LIVE_BUBBLES = 20  # progress bubbles (not in the store) kept per thread
# buttons shown (Stops included, which the store does not keep) remembered with their thread
MAX_KNOWN_CHOICES = 10_000


class WebSurface:
    name = "web"
    capabilities = Capabilities(
        edit=True, buttons=True, upload=True, typing=False, max_length=20_000, edit_interval_s=0.5
    )

    def __init__(self, uploads: StagedUploads | None = None) -> None:
        self.uploads = uploads  # the files sent with messages, until their turn takes them
        # plain dicts, not defaultdicts: a thread name is free text a client chooses, so a
        # lookup must not leave an entry behind (an empty one per name, kept until restart)
        self.live: dict[str, dict[str, dict[str, Any]]] = {}  # thread -> ref -> bubble
        # thread -> the queues of its open event streams; a thread without one has no key
        self.listeners: dict[str, set[asyncio.Queue[dict[str, Any]]]] = {}
        self.recent = EventLog()  # what a reconnected event stream missed
        # a shown button's token (before its code) -> its thread, the newest kept
        self.choice_threads: OrderedDict[str, str] = OrderedDict()

    def _remember_choices(self, thread: str, message: Outgoing) -> None:
        """Note the thread of each button ``message`` shows: a press is taken there only."""
        for choice in message.choices:
            key = choice_key(choice.token)
            self.choice_threads[key] = thread
            self.choice_threads.move_to_end(key)
        while len(self.choice_threads) > MAX_KNOWN_CHOICES:
            self.choice_threads.popitem(last=False)

    def _publish(self, thread: str, event: dict[str, Any]) -> None:
        event = self.recent.add(thread, event)
        listeners = self.listeners.get(thread, set())
        for queue in list(listeners):
            if queue.qsize() < MAX_STREAM_BACKLOG:
                queue.put_nowait(event)
            else:  # dropping events here left the stream silently short: it ends instead
                listeners.discard(queue)
                queue.put_nowait({"type": LAGGING})

    @staticmethod
    def _thread(target: ReplyTarget) -> str:
        return str(target.context.get("thread") or target.thread_key.removeprefix("web:"))

    @staticmethod
    def _entry(out: Outgoing, ref: str) -> dict[str, Any]:
        return {
            "ref": ref,
            "role": ROLE_BY_KIND.get(out.kind, "status"),
            "text": out.text,
            "choices": [
                {"token": c.token, "label": c.label, "style": c.style} for c in out.choices
            ],
            "at": time.time(),
        }

    async def send(self, target: ReplyTarget, message: Outgoing, *, reply_key: str) -> str:
        thread = self._thread(target)
        entry = self._entry(message, reply_key)
        self._remember_choices(thread, message)
        if reply_key.startswith("progress:"):
            bubbles = self.live.setdefault(thread, {})
            bubbles[reply_key] = entry
            while len(bubbles) > MAX_LIVE_BUBBLES:  # keep the recent ones; memory stays bounded
                bubbles.pop(next(iter(bubbles)))
        self._publish(thread, {"type": "message", **entry})
        return reply_key

    async def edit(self, target: ReplyTarget, ref: str, message: Outgoing) -> None:
        thread = self._thread(target)
        entry = self._entry(message, ref)
        self._remember_choices(thread, message)
        bubbles = self.live.get(thread, {})
        if ref in bubbles:
            entry["at"] = bubbles[ref]["at"]
            bubbles[ref] = entry
        self._publish(thread, {"type": "edit", **entry})

    async def upload(
        self,
        target: ReplyTarget,
        name: str,
        data: bytes,
        media_type: str | None,
        *,
        reply_key: str,
    ) -> str:
        self._publish(
            self._thread(target),
            {
                "type": "file",
                "ref": reply_key,
                "name": name,
                "size": len(data),
                "mediaType": media_type,
            },
        )
        return reply_key

    async def typing(self, target: ReplyTarget) -> None:
        return None

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """A file sent with a message (:mod:`.form`), taken from where it waited for its turn
        (:mod:`.uploads`); the core saves it into the home as every platform's attachment."""
        if self.uploads is None or not attachment.platform_id:
            raise DeliveryError(f"the file {attachment.name} was not kept", permanent=True)
        return await asyncio.to_thread(
            self.uploads.take, attachment.platform_id, attachment.name, max_bytes
        )


def choice_key(token: str) -> str:
    """The part of a button's token that names its prompt or run (before ``.<code>``)."""
    return token.partition(".")[0]
