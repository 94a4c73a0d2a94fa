"""Everything the engine says goes through here: recorded first, then delivered.

A reply is a row in the store before it is a message on a platform, so a crash between the
two delivers it at the next start (:mod:`bridge.engine.delivery`) instead of losing it.
This layer turns a message and an :class:`~bridge.model.Outgoing` into that row, with the
home's paths shown relative to the home, and closes messages with their notices.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from provisioning.errors import ProvisioningError

from ..files import paths_for_people
from ..logs import mask
from ..model import InboxState, Outgoing, ReplyKind, ReplyTarget
from ..store import MessageRecord, NewReply, ReplyRecord, RunOutcome, StoreError
from .core import EngineCore

log = logging.getLogger(__name__)


class Replies(EngineCore):
    """Recording and delivering replies, notices and the "interrupted" answer."""

    @staticmethod
    def _target(msg: MessageRecord) -> ReplyTarget:
        return ReplyTarget(surface=msg.platform, thread_key=msg.thread_key, context=msg.target)

    def _reply(self, msg: MessageRecord, key: str, out: Outgoing) -> NewReply:
        """What goes to the chat, with every configured secret masked: a run holds a provider
        key (``runner.extra_env``), and an answer quoting it would post it to the thread.
        What the gateway itself says (a notice, an error: refusals, "cannot prepare the
        home", a file left out) names files relative to the home, never by a path of the
        root (its log keeps those)."""
        text = mask(out.text)
        if out.kind in (ReplyKind.NOTICE, ReplyKind.ERROR):
            text = paths_for_people(text, self._shown_home(msg), self.homes.root.layout.root)
        if text != out.text:
            out = dataclasses.replace(out, text=text)
        return NewReply(
            dedupe_key=key,
            conversation_id=msg.conversation_id,
            outgoing=out,
            target=self._target(msg),
            message_id=msg.id,
        )

    def _shown_home(self, msg: MessageRecord) -> Path | None:
        """The home whose files a text about ``msg`` may name (relative to it), if any."""
        home = self._home_path(msg.conversation_id)
        if home is None:
            with contextlib.suppress(ProvisioningError):
                home = self.homes.path_for(msg.thread_key)
        return home

    async def _notice(self, msg: MessageRecord, key: str, text: str) -> None:
        """A status line ("queued", "waiting"...): best effort, it must never cost the
        message its run, so a store that cannot write it only logs."""
        try:
            records = await self.store.add_replies(
                [self._reply(msg, key, Outgoing(ReplyKind.NOTICE, text))]
            )
        except StoreError as exc:
            log.warning("the notice %s of %s was not recorded: %s", key, msg.thread_key, exc)
            return
        await self.deliverer.deliver(records)

    async def _finish_message(
        self, msg: MessageRecord, state: InboxState, key: str, text: str
    ) -> None:
        """Answer ``msg`` with ``text`` and close it (a command, a refusal), the write retried."""
        reply = self._reply(msg, f"{key}:{msg.id}", Outgoing(ReplyKind.NOTICE, text))
        complete = functools.partial(
            self.store.complete_message, msg.id, state, [reply], parts=msg.merged
        )
        await self._deliver_written(complete, f"the answer to message {msg.id}")

    async def _deliver_written(
        self, write: Callable[[], Awaitable[list[ReplyRecord]]], what: str
    ) -> None:
        """Make ``write`` (retried while the store cannot write), then deliver its replies.

        Not written only when the gateway stops first: the message is still accepted then,
        and the next start answers it.
        """
        records = await self._retry.run(write, what)
        if records is not None:
            await self.deliverer.deliver(records)

    async def _close_running(
        self, msg: MessageRecord, outcome: RunOutcome, state: InboxState, reply: NewReply
    ) -> list[ReplyRecord]:
        """Finish a message left ``running``: its run's outcome, its final state and its one
        reply in one transaction (a stop between two writes would leave it unanswered)."""
        runs = [
            run
            for run in await self.store.runs(msg.conversation_id, limit=50)
            if run.message_id == msg.id and run.outcome is None
        ]
        if not runs:  # no run of it in flight (not expected): the message alone
            return await self.store.complete_message(msg.id, state, [reply], error=outcome.error)
        records = await self.store.finish_run(runs[0].id, outcome, state, [reply])
        for stale in runs[1:]:  # never more than one; closed after the reply is recorded
            await self.store.finish_run(stale.id, outcome, state, [])
        return records

    def _interrupted_reply(self, msg: MessageRecord, text: str) -> NewReply:
        return self._reply(msg, f"interrupted:{msg.id}", Outgoing(ReplyKind.NOTICE, text))

    async def _interrupt(self, msg: MessageRecord, text: str) -> list[ReplyRecord]:
        """Record ``msg`` as interrupted (its run too) with ``text``; the reply to deliver."""
        outcome = RunOutcome(
            ok=False,
            exit_code=None,
            envelope_code="interrupted",
            error="the gateway stopped during the run",
        )
        reply = self._interrupted_reply(msg, text)
        return await self._close_running(msg, outcome, InboxState.INTERRUPTED, reply)

    async def _close_unreachable(self, msg: MessageRecord, why: str) -> None:
        """Close ``msg`` unrun: its chat takes no more messages (see :meth:`_chat_gone`)."""
        self.metrics.messages.labels(msg.platform, "unreachable").inc()
        text = f"⛔ Not run: this chat takes no more of the bot's messages ({why})."
        await self._finish_message(msg, InboxState.FAILED, "unreachable", text)
