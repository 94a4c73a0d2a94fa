"""Answers coming back to a run's prompts: a button press, a typed answer, or one that
came after the gateway restarted.

Only the prompt's asker may answer it (an operator may press Stop); the answer is recorded
before it is passed to the run, so a restart passes none twice. A press on a prompt that is
over says so, and its message loses its buttons (:mod:`bridge.presses` decides how each
surface shows that).
"""

from __future__ import annotations

import functools
import logging

from ..model import InboxState, Outgoing, ReplyKind
from ..ports import PressResult, PressStatus
from ..store import MessageRecord, PromptRecord
from . import prompts as P
from .asking import Asking
from .state import STOP_BUTTON, ActiveRun
from .texts import ENDED_PROMPT_TEXT, RUN_OVER_TEXT, RUN_OVER_TOAST

log = logging.getLogger(__name__)


class Answers(Asking):
    """Presses and typed answers to prompts."""

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
            stop_run.stopped_via = STOP_BUTTON
            stopping = self._stop_run(stop_run, stop_run.stopped_by, STOP_BUTTON)
            self._spawn(stopping, f"stop-{stop_run.run_id}")
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

    async def _answer_to_an_ended_prompt(self, msg: MessageRecord, prompt: PromptRecord) -> None:
        """A typed answer the gateway stopped before passing on: its prompt's run is over,
        so it is not run as a new message (a typed secret would have gone to the agent as a
        prompt); a secret is redacted, and the person told to send it again if it was new."""
        if prompt.kind == "secret":
            await self._retry.run(
                functools.partial(self.store.redact_message, msg.id), f"redacting {msg.id}"
            )
        await self._finish_message(msg, InboxState.DONE, "choice", ENDED_PROMPT_TEXT)
