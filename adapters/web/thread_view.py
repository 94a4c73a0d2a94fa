"""What ``GET /api/threads/{thread}/messages`` answers: a thread as the page shows it.

The store's transcript plus the live progress bubbles, made readable for a person:

* a settled prompt says how it was settled instead of keeping its buttons;
* a file is named relative to the conversation's home (``file``: ``workspace/plot.png``,
  never the server's path), with its base name, its link (:mod:`.files`) and whether the
  page may preview it; so is each file a person sent with a message (``files``), once its
  turn saved it into the home (before, its name only);
* a run that showed a progress bubble turns it into its summary line ("done in 3 s ·
  2 tools") when it ends, which left that line in a bubble of its own above a long answer.
  Once the answer is in, the line goes with it instead (``summary``: shown at the end of
  the answer's bubble), as the summary of a run that showed no bubble is. Other
  platforms keep their bubble: this is only how the web page lays the thread out.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bridge.engine.prompts import settled_note
from bridge.ports import AdapterContext
from bridge.store.records import TranscriptEntry

from .files import INLINE_TYPES, file_url, home_of, media_type, relative
from .surface import WebSurface, choice_key

Message = dict[str, Any]
PROGRESS = "progress:"  # the reply key of a run's bubble: progress:<run id>
RECENT_RUNS = 50  # the runs whose closed bubbles may be put with their answers


class ThreadView:
    def __init__(self, ctx: AdapterContext, surface: WebSurface) -> None:
        self.ctx = ctx
        self.surface = surface

    async def messages(self, thread: str) -> list[Message]:
        key = f"web:{thread}"
        entries = await self.ctx.store.transcript(key)
        conv = await self.ctx.store.conversation_by_key(key) if entries else None
        home = home_of(self.ctx, conv.home) if conv is not None else None
        settled = await self._settled(entries)
        messages = [_message(thread, e, settled, home) for e in entries]
        live = sorted(self.surface.live.get(thread, {}).values(), key=lambda e: e["at"])
        closed = [b for b in live if not b["choices"] and str(b["ref"]).startswith(PROGRESS)]
        if closed and conv is not None:
            placed = await self._with_answers(conv.id, closed, messages)
            live = [b for b in live if b["ref"] not in placed]
        for bubble in live:
            messages.append(
                {
                    "role": "status",
                    "text": bubble["text"],
                    "at": bubble["at"],
                    "choices": bubble["choices"],
                    "live": True,
                }
            )
        messages.sort(key=lambda m: m["at"])
        return messages

    async def _settled(self, entries: list[TranscriptEntry]) -> dict[int, str]:
        """reply id -> how each prompt that waits no more was settled."""
        settled: dict[int, str] = {}
        for e in entries:
            if e.role == "prompt" and e.choices and e.reply_id is not None:
                prompt = await self.ctx.store.get_prompt(choice_key(str(e.choices[0]["token"])))
                if prompt is None or prompt.state != "pending":
                    settled[e.reply_id] = settled_note(prompt)
        return settled

    async def _with_answers(
        self, conversation_id: int, closed: list[dict[str, Any]], messages: list[Message]
    ) -> set[str]:
        """Give each closed bubble's summary to its run's answer (the answer's last part, or
        its error) once that is in; the refs of the bubbles so placed."""
        runs = await self.ctx.store.runs(conversation_id, limit=RECENT_RUNS)
        message_of = {f"{PROGRESS}{r.id}": r.message_id for r in runs}
        placed: set[str] = set()
        for bubble in closed:
            asked = message_of.get(bubble["ref"])
            answers = [
                m
                for m in messages
                if asked is not None
                and m["messageId"] == asked
                and m["role"] in ("assistant", "error")
                and not m["file"]
                and m["replyId"] is not None
            ]
            if not answers:
                continue  # the answer is not delivered yet: the bubble stays, for now
            answers[-1]["summary"] = bubble["text"]
            placed.add(bubble["ref"])
        return placed


def _message(
    thread: str, e: TranscriptEntry, settled: dict[int, str], home: Path | None
) -> Message:
    note = settled.get(e.reply_id) if e.reply_id is not None else None
    message: Message = {
        "role": e.role,
        "text": e.text + (f"\n\n_{note}_" if note is not None else ""),
        "at": e.at,
        "sender": e.sender,
        "messageId": e.message_id,
        "replyId": e.reply_id,
        "choices": [] if note is not None else e.choices,
        "file": None,
    }
    if e.attachments:
        message["files"] = [_sent_file(thread, a, home) for a in e.attachments]
    if e.file_path:
        inside = relative(home, e.file_path) if home is not None else None
        # a name the home no longer places (or no home): its last part, and no link
        name = inside or os.path.basename(os.path.normpath(e.file_path))
        kind = media_type(name)
        message.update(
            file=name,
            fileName=os.path.basename(name),
            fileUrl=file_url(thread, inside) if inside else None,
            preview=inside is not None and kind in INLINE_TYPES,
        )
    return message


def _sent_file(thread: str, attachment: dict[str, Any], home: Path | None) -> Message:
    """A file a person sent with a message: its name, and once its turn saved it into the
    home, where (relative to the home), its link and whether the page may preview it."""
    saved = attachment.get("local_path")
    inside = relative(home, str(saved)) if saved and home is not None else None
    # the name it was sent as (its saved name adds the message's id before it)
    name = str(attachment.get("name") or (os.path.basename(inside) if inside else "file"))
    return {
        "file": inside,
        "fileName": name,
        "fileUrl": file_url(thread, inside) if inside else None,
        "preview": inside is not None and media_type(inside) in INLINE_TYPES,
        "size": attachment.get("size"),
    }
