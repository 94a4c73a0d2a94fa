"""A run's questions and approvals: shown to their person, answered once, or expired.

A prompt event from the runner becomes a recorded prompt and a message with buttons (or
numbered choices where the platform has none). Only its asker may answer it, by a press or
by typing; while it waits the run gives its run slot back. An answer is recorded before it
is passed to the run, so a restart passes none twice; an unanswered prompt expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import Any

from ..model import (
    InboxState,
    Outgoing,
    ReplyKind,
)
from ..ports import (
    DeliveryError,
    PressResult,
    PressStatus,
)
from ..store import (
    MessageRecord,
    PromptRecord,
    StoreError,
)
from . import prompts as P
from .replies import Replies
from .state import (
    ActiveRun,
)
from .texts import (
    ENDED_PROMPT_TEXT,
    RUN_OVER_TEXT,
    RUN_OVER_TOAST,
)

log = logging.getLogger(__name__)


class Asking(Replies):
    """Prompts shown, parked, answered (press or typed), expired and declined."""

    async def press(
        self,
        token: str,
        actor_id: str,
        *,
        is_operator: bool = False,
        actor_name: str | None = None,
    ) -> PressResult:
        prompt_token, code = P.split_choice(token)
        stop_run = self._stop_tokens.get(prompt_token)
        if stop_run is not None:
            if actor_id != stop_run.message.sender_id and not is_operator:
                return PressResult(
                    PressStatus.NOT_YOURS, "Only the person who started this run can stop it."
                )
            requester = stop_run.message
            by = requester.sender_name if actor_id == requester.sender_id else actor_name
            # answered at once, the stop made meanwhile: a runner given its whole grace to
            # exit would hold the press past the platform's deadline (Slack: 3 s) otherwise
            stop_run.stopped_by = by or actor_id  # the name /stop would show
            self._spawn(self._stop_run(stop_run, stop_run.stopped_by), f"stop-{stop_run.run_id}")
            return PressResult(PressStatus.OK, "Stopping…")
        if code == P.STOP and prompt_token in self._closed_bubbles:
            # pressed while its run ended: the bubble is (being) turned into the summary
            return PressResult(PressStatus.EXPIRED, RUN_OVER_TOAST)
        if code == P.STOP and P.issued(token):
            # the Stop of a bubble whose run is over (or began before a restart): maybe one
            # whose id the gateway never learnt (the answer to its send was lost), so nothing
            # closed it and it still reads "working"; the presser's message now says so
            return PressResult(
                PressStatus.EXPIRED,
                RUN_OVER_TOAST,
                resolved=Outgoing(ReplyKind.NOTICE, RUN_OVER_TEXT),
            )
        record = await self.store.get_prompt(prompt_token)
        slot = self._slots.get(record.conversation_id) if record else None
        run = slot.active if slot else None
        run_over = record is not None and (run is None or run.run_id != record.run_id)
        if record is not None and run_over and record.state != "answered":
            # left unanswered by its run (e.g. a copy of the prompt the run's end could not
            # settle): the pressed message loses its buttons and says it expired
            conv = await self.store.conversation(record.conversation_id)
            room = self._prompt_room(conv.platform) if conv else P.DEFAULT_ROOM
            expired = Outgoing(ReplyKind.NOTICE, P.expired_text(record, room))
            return PressResult(PressStatus.EXPIRED, "This request has expired.", resolved=expired)
        if record is None or record.state != "pending" or run is None or run.handle is None:
            return PressResult(PressStatus.EXPIRED, "This request has expired.")
        if actor_id != record.requester:
            who = record.payload.get("requesterName") or record.requester
            return PressResult(PressStatus.NOT_YOURS, f"Only {who} can answer this.")
        return await self._resolve(run, record, code, actor_id, text=None)

    async def _resolve(
        self,
        run: ActiveRun,
        record: PromptRecord,
        code: str,
        actor: str,
        text: str | None,
        *,
        typed: bool = False,
        by_message: int | None = None,
    ) -> PressResult:
        """Answer ``record`` (and, for "… all", every pending approval). The message of a
        pressed prompt is settled by its adapter; a typed answer's prompt (nothing pressed)
        and the others answered with it are settled here, so none keeps its buttons.
        ``by_message``: the typed message that answers, noted with the answer (a crash
        before that message is closed must not run it again after the restart)."""
        targets = [record]
        if record.kind == "approval" and code in (P.APPROVE_ALL, P.REJECT_ALL):
            targets = [r for r in run.prompts.values() if r.kind == "approval"]
        resolved_any = False
        name = run.message.sender_name or actor
        for rec in targets:
            answer = P.frame(rec, code, text)
            stored = {k: v for k, v in answer.items() if k != "value"}
            if by_message is not None:
                stored["byMessage"] = by_message
            if not await self.store.resolve_prompt(rec.token, stored):
                continue
            resolved_any = True
            run.prompts.pop(rec.token, None)
            self._unpark(run)  # counted again before the runner hears the answer
            assert run.handle is not None
            await run.handle.answer(answer)
            if rec.token != record.token:  # answered with it ("Approve all"): say so there too,
                # after the press is answered (edits are paced, seconds apart in a group, and
                # the presser's button spins until the answer; Telegram's lasts ~15 s)
                settled = P.resolved_text(rec, code, name, None)
                self._spawn(self._settle_prompt_message(run, rec, settled), f"settle-{rec.token}")
            elif typed:
                await self._settle_prompt_message(run, rec, P.resolved_text(rec, code, name, text))
            else:
                run.prompt_replies.pop(rec.token, None)  # the caller settles the one pressed
        if not resolved_any:
            return PressResult(PressStatus.EXPIRED, "This request was already answered.")
        if not run.prompts:
            run.progress.waiting = False
        shown = P.resolved_text(record, code, name, text)
        return PressResult(PressStatus.OK, shown, resolved=Outgoing(ReplyKind.NOTICE, shown))

    def _answers_prompt(self, run: ActiveRun, msg: MessageRecord) -> bool:
        """A typed message that answers a pending prompt (numbered choice, text, secret);
        never the first message of a fresh conversation ("/new <question>")."""
        if msg.sender_id != run.message.sender_id or not run.prompts or msg.starts_epoch:
            return False
        oldest = next(iter(run.prompts.values()))
        if oldest.kind in ("input", "secret"):
            return True
        return self._numbered(run) and msg.text.strip().isdigit()

    async def _typed_answer(self, run: ActiveRun, msg: MessageRecord) -> None:
        record = next(iter(run.prompts.values()), None)
        if record is None:  # answered meanwhile (a button, or the message before this one)
            if msg.text.strip() and not msg.text.strip().isdigit():  # maybe a typed secret
                await self._retry.run(
                    functools.partial(self.store.redact_message, msg.id), f"redacting {msg.id}"
                )
            await self._finish_message(
                msg, InboxState.DONE, "choice", "This request was already answered."
            )
            return
        text = msg.text.strip()
        others = sum(1 for r in run.prompts.values() if r.kind == "approval") - 1
        codes = P.codes_for(record, others_pending=max(others, 0))
        code, free = "", None
        numbered = self._numbered(run)
        if numbered and text.isdigit() and 1 <= int(text) <= len(codes):
            code = codes[int(text) - 1]
        elif record.kind in ("input", "secret"):
            free = msg.text
        else:
            how = f"reply with a number from 1 to {len(codes)}" if numbered else "use its buttons"
            await self._finish_message(
                msg, InboxState.DONE, "choice", f"This request waits for an answer: please {how}."
            )
            return
        if record.kind == "secret":
            await self._retry.run(
                functools.partial(self.store.redact_message, msg.id), f"redacting {msg.id}"
            )
        result = await self._retry.run(
            functools.partial(
                self._resolve, run, record, code, msg.sender_id, free, typed=True, by_message=msg.id
            ),
            f"the answer of message {msg.id} to a prompt",
        )
        if result is None:  # stopping: the run ends unanswered, the next start tells it
            return
        await self._finish_message(msg, InboxState.DONE, "choice", result.text)

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

    async def _answer_to_an_ended_prompt(self, msg: MessageRecord, prompt: PromptRecord) -> None:
        """A typed answer the gateway stopped before passing on: its prompt's run is over,
        so it is not run as a new message (a typed secret would have gone to the agent as a
        prompt); a secret is redacted, and the person told to send it again if it was new."""
        if prompt.kind == "secret":
            await self._retry.run(
                functools.partial(self.store.redact_message, msg.id), f"redacting {msg.id}"
            )
        await self._finish_message(msg, InboxState.DONE, "choice", ENDED_PROMPT_TEXT)


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
