"""Intake: a message persisted, then queued behind its conversation's run, or answered.

``submit`` returns only after the inbox write, so an adapter acks the platform after it.
A command is answered at once, a typed answer goes to its prompt, anything else waits FIFO
in its conversation's queue (bounded), and one worker per conversation runs its turns one
at a time. Parts of one message (a Telegram album) are joined before it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time

from provisioning import naming

from ..model import Inbound, InboxState, Outgoing, ReplyKind
from ..ports import SubmitResult, SubmitStatus
from ..store import MessageRecord, RunOutcome
from .commands import Command, parse_command
from .message_queue import album_key
from .run import gateway_failure
from .state import (
    CLOSED_ALBUMS_KEPT,
    PARTS_QUIET_S,
    PARTS_WAIT_MAX_S,
    ActiveRun,
    ConversationSlot,
    remember,
)
from .texts import NEW_WITH_TEXT, failure_text
from .turn import Turns

log = logging.getLogger(__name__)


class Intake(Turns):
    """Submitting, dispatching and working off each conversation's queue."""

    async def submit(self, inbound: Inbound) -> SubmitResult:
        if self.stopping:
            return SubmitResult(SubmitStatus.REFUSED)
        home = naming.home_name(inbound.thread_key)
        command = parse_command(inbound.text)
        starts_epoch = command is not None and command.command is Command.NEW
        fresh_question = (
            starts_epoch
            and command is not None
            and (bool(command.argument) or bool(inbound.attachments))
        )
        if fresh_question:
            # "/new what is 2+2" (or a file captioned "/new"): the fresh conversation starts
            # with it (kept as an ordinary message of the new epoch: queued, run, answered
            # exactly once)
            assert command is not None
            inbound = dataclasses.replace(inbound, text=command.argument)
            command = None
        record, created = await self.store.accept(
            inbound, home=home, is_command=bool(command), starts_epoch=starts_epoch
        )
        if not created:
            self.metrics.count_message(inbound.platform, "duplicate")
            return SubmitResult(SubmitStatus.DUPLICATE, record.id)
        self.metrics.count_message(inbound.platform, "accepted")
        self.deliverer.reachable(record.conversation_id)  # it wrote: it can be answered
        remember(self._home_names, record.conversation_id, home)
        if self.started:
            if fresh_question:
                self._spawn(
                    self._notice(record, f"new:{record.id}", NEW_WITH_TEXT), f"new-{record.id}"
                )
            self._dispatch(record)
        return SubmitResult(SubmitStatus.ACCEPTED, record.id)

    def _dispatch(self, msg: MessageRecord, *, admitted: bool = False) -> None:
        """Queue (or answer at once) an accepted message; ``admitted``: queued before a
        restart, within the limit then (one waiting for a run slot had left the queue)."""
        command = parse_command(msg.text) if msg.is_command else None
        if command is not None:
            self._spawn(self._command(msg, command), f"command-{msg.id}")
            return
        album = album_key(msg)
        if album is not None and (msg.conversation_id, *album) in self._closed_albums:
            # closed without a slot: nothing would forget one made for it
            self._spawn(self._close_part(msg), f"part-{msg.id}")
            return
        slot = self._slot(msg.conversation_id)
        if slot.active is not None and self._answers_prompt(slot.active, msg):
            self._close_album(msg)  # its other parts: the answer was given (files can't be)
            self._spawn(self._typed_answer(slot.active, msg), f"answer-{msg.id}")
            return
        limit = self.settings.limits.max_queued_per_conversation
        if album is not None and (slot.joining == album or slot.queue.holds_album(album)):
            admitted = True  # one message's parts count once: its first part was let in
        waiting = slot.queue.waiting
        if not admitted and waiting >= limit and (slot.active is not None or slot.queue):
            text = (
                f"⏸️ {waiting} messages are already waiting in this conversation (the "
                f"limit is {limit}). This one was not queued: send it again when the agent "
                "has caught up."
            )
            self._close_album(msg)  # one refusal for the whole album
            self._spawn(
                self._finish_message(msg, InboxState.FAILED, "overflow", text), f"overflow-{msg.id}"
            )
            return
        slot.queue.append(msg)
        slot.arrived.set()
        self.metrics.queue_depth.inc()
        if slot.active is not None and not slot.told:
            # one notice per burst: each costs two writes, and a burst of messages needs
            # one "they will run in order", not one line each
            slot.told = True
            text = self._queued_text(slot.active, msg, slot.queue.waiting)
            self._spawn(self._notice(msg, f"queued:{msg.id}", text), f"queued-{msg.id}")
        if slot.worker is None or slot.worker.done():
            slot.worker = asyncio.create_task(
                self._work(msg.conversation_id), name=f"conversation-{msg.conversation_id}"
            )

    def _chat_gone(self, conversation_id: int, why: str) -> None:
        """The conversation's chat takes no more messages (the bot blocked or removed): what
        it still had queued is not run, since no one would read the answers. Each is closed
        as failed with a reply that says why (recorded; the deliverer does not send it)."""
        slot = self._slots.get(conversation_id)
        if slot is None or not slot.queue:
            return
        dropped = slot.queue.drain()
        self.metrics.queue_depth.dec(len(dropped))
        slot.told = False
        log.warning(
            "conversation %d: %d queued message(s) not run: the chat takes no more messages",
            conversation_id,
            len(dropped),
        )
        for msg in dropped:
            self._spawn(self._close_unreachable(msg, why), f"unreachable-{msg.id}")

    def _queued_text(self, run: ActiveRun, msg: MessageRecord, place: int) -> str:
        """The word to a message queued behind ``run``. When the run waits for this very
        person to press a button (typing does not answer it), they are told so: "still
        working" would have them wait for a run that waits for them."""
        if run.prompts and msg.sender_id == run.message.sender_id:
            how = (
                "reply with the number of your choice" if self._numbered(run) else "use its buttons"
            )
            return (
                f"👆 The agent is waiting for your answer to its request above: please {how}. "
                f"This message is queued (number {place} in line) and runs after."
            )
        return (
            f"🕐 Queued: the agent is still working on an earlier message; this one is "
            f"number {place} in line, and messages sent meanwhile run in order."
        )

    async def _work(self, conversation_id: int) -> None:
        slot = self._slot(conversation_id)
        while not self.stopping:
            if not slot.queue:
                if slot.last is None:
                    break
                # idle: the last run's leftovers are gone before its slot is forgotten
                last, slot.last = slot.last, None
                await last.settled()
                continue
            msg = slot.queue.popleft()
            self.metrics.queue_depth.dec()
            if not slot.queue:  # the burst is over: the next message queued is told again
                slot.told = False
            slot.next, slot.stop_next = msg, None  # a /stop from here on stops its run
            if msg.part_of is not None:
                msg = slot.next = await self._join_parts(slot, msg)
            try:
                # A store error reaches here only before the run's start (the first write
                # that counts; after it every write is retried where it is made): the
                # message is still accepted, so the whole turn is tried again once the
                # store can write. When the gateway stops first, the next start runs it.
                await self._retry.run(
                    functools.partial(self._turn, slot, msg),
                    f"message {msg.id} of {msg.thread_key}",
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("turn for message %d failed unexpectedly", msg.id)
                await self._fail_left_running(msg, exc)
        slot.worker = None
        slot.told = False
        slot.next = slot.stop_next = None
        if not self.stopping:  # stopping: stop() still waits for what the slot holds
            self._forget_if_idle(conversation_id)

    async def _join_parts(self, slot: ConversationSlot, first: MessageRecord) -> MessageRecord:
        """``first`` with the other parts of its message (queued now, or within the wait):
        their texts and files joined, their ids in ``merged`` (the run's start closes them).

        The platform gives no count of the parts, so the wait ends when none came for
        PARTS_QUIET_S (bounded by PARTS_WAIT_MAX_S); after a restart every part is queued
        already and nothing is waited for.
        """
        parts = [first]
        album = slot.joining = album_key(first)
        assert album is not None
        started = time.monotonic()
        try:
            while True:
                more = slot.queue.take_album(album)
                self.metrics.queue_depth.dec(len(more))
                parts += more
                newest = max(p.received_at for p in parts)
                wait = min(
                    newest + PARTS_QUIET_S - time.time(),
                    started + PARTS_WAIT_MAX_S - time.monotonic(),
                )
                if wait <= 0 or self.stopping:
                    break
                slot.arrived.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(slot.arrived.wait(), wait)
        finally:
            slot.joining = None
        if len(parts) == 1:
            return first
        parts.sort(key=lambda p: p.id)
        log.info("message %d of %s: %d parts run as one", parts[0].id, first.thread_key, len(parts))
        return dataclasses.replace(
            parts[0],
            text="\n\n".join(p.text for p in parts if p.text.strip()),
            attachments=[a for p in parts for a in p.attachments],
            merged=tuple(p.id for p in parts[1:]),
        )

    def _close_album(self, msg: MessageRecord) -> None:
        """``msg`` was answered without a run: its album's later parts close silently."""
        album = album_key(msg)
        if album is not None:
            key = (msg.conversation_id, *album)
            remember(self._closed_albums, key, msg.id, CLOSED_ALBUMS_KEPT)

    async def _close_part(self, msg: MessageRecord) -> None:
        """A later part of an album answered without a run: closed, nothing sent."""
        write = functools.partial(self.store.complete_message, msg.id, InboxState.MERGED, [])
        await self._retry.run(write, f"closing message {msg.id}, part of an answered album")

    async def _fail_left_running(self, msg: MessageRecord, exc: Exception) -> None:
        """A turn that failed unexpectedly answers its message as a run the gateway could
        not start: one it left ``running`` (not left until the next start says
        "interrupted"), and one still ``accepted`` (taken off its queue before its run
        began: nothing would answer it before a restart)."""
        try:
            current = await self.store.get_message(msg.id)
            if current is None or current.state not in (InboxState.RUNNING, InboxState.ACCEPTED):
                return
            result = gateway_failure(exc, started=False)
            outcome = RunOutcome(
                ok=False, exit_code=None, envelope_code=result.code, error=result.error
            )
            reply = self._reply(
                msg, f"error:{msg.id}", Outgoing(ReplyKind.ERROR, failure_text(result, None))
            )
            if current.state is InboxState.ACCEPTED:
                write = functools.partial(
                    self.store.complete_message,
                    msg.id,
                    InboxState.FAILED,
                    [reply],
                    error=result.error,
                    parts=msg.merged,
                )
            else:
                write = functools.partial(
                    self._close_running, msg, outcome, InboxState.FAILED, reply
                )
            records = await self._retry.run(write, f"the failed turn of message {msg.id}")
        except Exception:
            log.exception("message %d could not be answered; the next start does", msg.id)
            return
        if records is not None:
            await self.deliverer.deliver(records)
