"""A run's questions and approvals: shown to their person, answered once, or expired.

A prompt event from the runner becomes a recorded prompt and a message with buttons (or
numbered choices where the platform has none), shown once. While it waits the run gives
its run slot back; an unanswered prompt expires, and its message says so. The answers that
come back (a press, a typed answer) are :mod:`.answers`'.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import Any

from ..model import Outgoing, ReplyKind
from ..ports import DeliveryError
from ..store import MessageRecord, PromptRecord, StoreError
from . import prompts as P
from .replies import Replies
from .state import ActiveRun

log = logging.getLogger(__name__)


class Asking(Replies):
    """Prompts shown, parked, answered (press or typed), expired and declined."""

    async def _on_prompt(self, run: ActiveRun, event_type: str, data: dict[str, Any]) -> None:
        msg = run.message
        record = P.from_event(
            event_type,
            data,
            run_id=run.run_id,
            conversation_id=msg.conversation_id,
            requester=msg.sender_id,
            requester_name=msg.sender_name or msg.sender_id,
        )
        if record is None:
            log.warning("runner sent a %s without an id; ignored", event_type)
            return
        assert run.handle is not None
        if record.kind == "secret" and msg.shared_chat:
            await run.handle.answer(P.unavailable_secret(record))
            run.progress.waiting = bool(run.prompts)  # answered: nobody is waited for
            name = data.get("name") or "a secret"
            await self._notice(
                msg,
                f"secret-refused:{run.run_id}:{record.request_id}",
                f"🔒 The agent asked for {name}. Secrets are never collected in a shared chat, "
                "so it was told none is available here.",
            )
            return
        try:
            shown = await self._show_prompt(run, record)
        except Exception:  # a store that cannot write, a bug: the run must not wait forever
            log.exception("could not show a prompt of %s", msg.thread_key)
            shown = False
        if not shown:
            await self._decline_unshown(run, record)

    async def _show_prompt(self, run: ActiveRun, record: PromptRecord) -> bool:
        """Store and send the prompt; False when it did not reach the person."""
        msg = run.message
        await self.store.add_prompts([record])
        others = sum(1 for r in run.prompts.values() if r.kind == "approval")
        run.prompts[record.token] = record
        surface = self.surfaces.get(msg.platform)
        buttons = bool(surface and surface.capabilities.buttons)
        out = P.message_for(
            record,
            others_pending=others if record.kind == "approval" else 0,
            buttons=buttons,
            room=self._prompt_room(msg.platform),
        )
        records = await self.store.add_replies([self._reply(msg, f"prompt:{record.token}", out)])
        run.prompt_replies[record.token] = records[0].id
        if await self.deliverer.deliver(records):
            return False
        self._park(run, record)
        wait_s = self.settings.limits.prompt_wait_s
        if wait_s is not None:  # counted from when the person could see it
            self._spawn(self._expire_prompt(run, record, wait_s), f"expire-{record.token}")
        return True

    def _park(self, run: ActiveRun, record: PromptRecord) -> None:
        """``record`` is shown and waits for its person: while nobody answers, the run gives
        its gateway and team slots to who waits for one (its person's cap still counts it,
        so nobody parks many runs)."""
        if run.lease is not None and record.token in run.prompts:  # not answered meanwhile
            self._runs.park(run.lease)

    def _unpark(self, run: ActiveRun) -> None:
        """No prompt of ``run`` waits any more: it counts again at once, over the caps for
        a moment if need be (an answer never waits behind other people's runs; no new run
        starts until the count is back under the cap)."""
        if run.lease is not None and not run.prompts:
            self._runs.resume(run.lease)

    async def _expire_prompt(self, run: ActiveRun, record: PromptRecord, wait_s: float) -> None:
        """Decline a prompt nobody answered within ``limits.prompt_wait_s``.

        A run waiting for a person gives its gateway slot back meanwhile (:meth:`_park`),
        but it still holds its conversation (messages queue behind it) and one of its
        person's ``limits.max_runs_per_user`` (its timeout paused, as the runner contract
        says), for as long as nobody answers. The agent hears "declined" (an approval:
        rejected) and goes on; the prompt's message says it expired.
        """
        try:
            await asyncio.wait_for(run.done.wait(), wait_s)
            return  # the run ended first: its end settles what is left
        except TimeoutError:
            pass
        if record.token not in run.prompts or run.handle is None:
            return  # answered meanwhile
        code = P.REJECT if record.kind == "approval" else P.DECLINE
        answer = P.frame(record, code)
        if not await self._retry.run(
            functools.partial(self.store.resolve_prompt, record.token, answer, expired=True),
            f"expiring prompt {record.request_id}",
        ):
            return
        run.prompts.pop(record.token, None)
        self._unpark(run)
        log.info(
            "prompt %s of %s unanswered for %.0fs: declined",
            record.request_id,
            run.message.thread_key,
            wait_s,
        )
        await run.handle.answer(answer)
        if not run.prompts:
            run.progress.waiting = False
        await self._settle_prompt_message(
            run, record, P.unanswered_text(record, wait_s, self._prompt_room(run.message.platform))
        )

    async def _settle_prompt_message(self, run: ActiveRun, record: PromptRecord, text: str) -> None:
        """Edit a prompt's message to ``text`` with no buttons left (best effort).

        The message of the prompt a person pressed is settled by its adapter; this one is
        for the others: those "Approve all" answered with it, and those still pending when
        the run ended (their presses are refused, but buttons left on screen invite them).
        """
        reply_id = run.prompt_replies.pop(record.token, None)
        surface = self.surfaces.get(run.message.platform)
        caps = surface.capabilities if surface is not None else None
        if reply_id is None or surface is None or not (caps and caps.buttons and caps.edit):
            return
        try:
            await self.deliverer.marked(run.message.conversation_id)  # its ref is on disk
            reply = await self.store.get_reply(reply_id)
            if reply is None or reply.platform_ref is None:
                return  # never shown
            await surface.edit(run.target, reply.platform_ref, Outgoing(ReplyKind.NOTICE, text))
        except (DeliveryError, StoreError, OSError) as exc:
            log.info("the message of prompt %s was not settled: %s", record.request_id, exc)

    async def _decline_unshown(self, run: ActiveRun, record: PromptRecord) -> None:
        """A prompt nobody can see is declined at once: the runner waits on stdin for an
        answer, with its timeout paused, so unanswered it would hold the conversation (and a
        run slot) until someone sent /stop."""
        if run.prompts.pop(record.token, None) is None:
            return  # answered meanwhile (a typed answer): the runner heard once already
        log.warning(
            "the prompt %s of %s could not be shown; declined for the agent",
            record.request_id,
            run.message.thread_key,
        )
        if not run.prompts:
            run.progress.waiting = False
        self._unpark(run)
        answer = P.frame(record, "")  # "" declines every kind (approval, input, secret)
        with contextlib.suppress(StoreError):
            await self.store.resolve_prompt(record.token, answer)
        assert run.handle is not None
        await run.handle.answer(answer)


def answered_prompt(
    msg: MessageRecord, prompts: list[PromptRecord], numbered: bool
) -> PromptRecord | None:
    """The prompt (pending when the gateway stopped) that ``msg`` was typed to answer, by the
    rule the running gateway applies (:meth:`Engine._answers_prompt`; ``numbered``: the
    platform shows numbered choices, no buttons), or None."""
    if msg.is_command or msg.starts_epoch:
        return None
    for prompt in prompts:  # oldest first, as they were answered
        if prompt.requester != msg.sender_id or prompt.created_at > msg.received_at:
            continue
        if prompt.kind in ("input", "secret") or (numbered and msg.text.strip().isdigit()):
            return prompt
        return None
    return None
