"""Start-up recovery: nothing an earlier process accepted is lost or answered twice.

At start, prompts left pending are expired, runs that died with the process get one
"interrupted" reply (in the transaction that closes them), what they left running is
killed, undelivered replies are delivered, and messages that never ran are queued again.
"""

from __future__ import annotations

import asyncio
import logging
import secrets

from provisioning.accounts import AccountRegistry

from ..model import InboxState
from ..runner.killer import AccountKillError, kill_accounts
from ..runner.procs import kill_all
from ..store import MessageRecord, PromptRecord, ReplyRecord, StoreError
from .asking import answered_prompt
from .commands import Command, parse_command
from .intake import Intake
from .state import CLOSED_ALBUMS_KEPT, conversation_name, remember
from .texts import INTERRUPTED_TEXT, PASSED_ON_TEXT, STOP_AFTER_RESTART_TEXT

log = logging.getLogger(__name__)


class Recovery(Intake):
    """Recovering what the previous process left: runs, replies, queues, processes."""

    async def start(self) -> None:
        """Recover: expire stale prompts, answer interrupted runs, deliver, requeue."""
        secret = await self.store.get_kv("run-tag-secret")
        if secret is None:
            secret = secrets.token_hex(16)
            await self.store.set_kv("run-tag-secret", secret)
        self._tag_secret = bytes.fromhex(secret)
        # messages left accepted, and the prompts still waiting when the gateway stopped:
        # one of those messages may be the answer to such a prompt (a secret, typed)
        accepted = await self.store.messages_in_state(InboxState.ACCEPTED)
        waiting: dict[int, list[PromptRecord]] = {}
        for left in await self.store.pending_prompts(None) if accepted else []:
            waiting.setdefault(left.conversation_id, []).append(left)
        # and those passed on as an answer just before the stop (the answer written, the
        # message not yet closed): not run again as a message of their own
        passed_on = await self.store.answering_messages([m.id for m in accepted])
        # and the parts of an album answered without a run (refused whole, or a typed
        # answer) that the stop left before they were closed: closed now, as they would be
        for album in await self.store.albums_answered_without_run() if accepted else []:
            remember(self._closed_albums, album, 0, CLOSED_ALBUMS_KEPT)
        expired = await self.store.expire_prompts(None)
        if expired:
            log.info("expired %d prompt(s) left from before the restart", expired)
        if self.homes.isolated and self.homes.registry is not None:
            # nothing runs yet: whatever an account runs was left by a run that ended with
            # the gateway (one that finished just before it, or a daemon of any earlier one).
            # In the background (about half a millisecond per account): runs wait for it.
            self._leftovers_killed.clear()
            self._spawn(self._kill_account_leftovers(self.homes.registry), "kill-leftovers")
            await self.count_accounts()
        interrupted: list[ReplyRecord] = []
        running = await self.store.messages_in_state(InboxState.RUNNING)
        if running:  # a backend's runs outlive the process that started them (a daemon's)
            await self.backend.end_leftovers(await self._conversations_of(running))
        for msg in running:
            await self._kill_leftovers(msg)
            interrupted += await self._interrupt(msg, INTERRUPTED_TEXT)
        # Finished without a reply (an older gateway closed an interrupted run in two
        # writes and stopped between them): acknowledged, so each still gets one.
        unanswered = await self.store.unanswered_messages()
        if unanswered:
            log.warning("%d message(s) were left with no reply; telling them", len(unanswered))
            interrupted += await self.store.add_replies(
                [self._interrupted_reply(msg, INTERRUPTED_TEXT) for msg in unanswered]
            )
        fresh = {rec.id for rec in interrupted}
        pending = [r for r in await self.store.undelivered_replies() if r.id not in fresh]
        if pending:
            log.info("delivering %d reply(ies) left undelivered", len(pending))
        for conversation_id in {rec.conversation_id for rec in pending + interrupted}:
            conv = await self.store.conversation(conversation_id)  # artifacts are read there
            if conv is not None:
                remember(self._home_names, conversation_id, conv.home)
        if pending or interrupted:
            # In the background: the gateway listens meanwhile (a platform that is down at
            # start must not keep intake down while each notice waits out its retries).
            # Those left from before go first in each conversation (the deliverer keeps
            # a conversation's replies in order of arrival).
            self._spawn(self._recover_delivery(pending, interrupted), "recover-delivery")
        for msg in accepted:  # admitted before the stop: no queue limit applies again
            if msg.id in passed_on:
                self._spawn(
                    self._finish_message(msg, InboxState.DONE, "choice", PASSED_ON_TEXT),
                    f"passed-on-{msg.id}",
                )
                continue
            command = parse_command(msg.text) if msg.is_command else None
            if command is not None and command.command is Command.STOP:
                # meant for the run working (or about to) when it was sent: that one ended
                # with the restart; requeued, it would stop the next message instead
                stopped = self._finish_message(
                    msg, InboxState.DONE, "command-stop", STOP_AFTER_RESTART_TEXT
                )
                self._spawn(stopped, f"command-{msg.id}")
                continue
            numbered = self._numbered_on(msg.platform)
            prompt = answered_prompt(msg, waiting.get(msg.conversation_id, []), numbered)
            if prompt is not None:
                # answered by this message: one typed after it runs, as it would have run
                waiting[msg.conversation_id].remove(prompt)
                self._spawn(self._answer_to_an_ended_prompt(msg, prompt), f"ended-{msg.id}")
                continue
            self._dispatch(msg, admitted=True)
        if accepted:
            log.info("requeued %d message(s) accepted before the restart", len(accepted))
        self.started = True

    async def _kill_account_leftovers(self, registry: AccountRegistry) -> None:
        try:
            uids = await asyncio.to_thread(registry.owned_uids)
            await asyncio.to_thread(kill_accounts, uids)
        except (AccountKillError, ValueError, OSError) as exc:
            log.error("%s; each is killed again after its conversation's next run", exc)
        finally:
            self._leftovers_killed.set()

    async def _recover_delivery(
        self, pending: list[ReplyRecord], interrupted: list[ReplyRecord]
    ) -> None:
        await asyncio.gather(
            self.deliverer.deliver(pending, in_doubt=True), self.deliverer.deliver(interrupted)
        )

    async def _conversations_of(self, messages: list[MessageRecord]) -> set[str]:
        """The runner's conversation names of the runs ``messages`` were in."""
        names = set()
        for msg in messages:
            for run in await self.store.runs(msg.conversation_id, limit=50):
                if run.message_id == msg.id and run.outcome is None:
                    names.add(conversation_name(msg.thread_key, run.epoch))
        return names

    async def _kill_leftovers(self, msg: MessageRecord) -> None:
        """A run that died with the gateway may have left processes: end them first (by
        its tag; isolated, its account is killed whole with every other at the start)."""
        left = await asyncio.to_thread(kill_all, self._kill_tag(msg.id), None, None)
        if left:
            log.error("processes %s of an interrupted run survived SIGKILL", left)

    async def _kill_cut_off_runs(self) -> None:
        """SIGKILL what the runs the abort cut off left running, before the gateway exits.

        Cancelling a run's task only stops waiting for it: a run whose stop needs longer
        than the gateway's grace (``runner.kill_grace_s`` above ``server.shutdown_grace_s``,
        a runner slow to end) went on as the conversation's account with nobody left to
        stop it. Killed as the next start kills them (each run by its tag, every
        conversation account whole when isolated); their messages stay ``running`` and the
        next start answers them "interrupted".
        """
        try:
            running = await self.store.messages_in_state(InboxState.RUNNING)
            if running and self.homes.isolated and self.homes.registry is not None:
                uids = await asyncio.to_thread(self.homes.registry.owned_uids)
                await asyncio.to_thread(kill_accounts, uids)
            for msg in running:
                await self._kill_leftovers(msg)
        except (AccountKillError, StoreError, OSError, ValueError) as exc:
            log.error("runs cut off may still be running (%s); the next start kills them", exc)
