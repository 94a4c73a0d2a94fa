"""The turn engine: one run at a time per conversation, commands at once, nothing lost.

Intake persists first (``submit`` returns only after the inbox write, so an adapter acks
the platform after it). Commands are answered at once; other messages wait FIFO behind
their conversation's run, within a bound, and behind a global cap on runs in flight. A run
starts as the conversation's account; its events become progress and prompts; its outcome
and replies are recorded in one transaction and then delivered. At start, messages that
never ran are run, runs that died with the process get one "interrupted" reply (in the
same transaction that closes them), a message found finished with no reply gets one too,
and undelivered replies are delivered. A store that cannot write (a full disk) is waited
out by one shared :class:`~bridge.store.StoreRetry` wherever an answer is owed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hmac
import logging
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from provisioning import naming
from provisioning.accounts import AccountRegistry
from provisioning.errors import ProvisioningError, UnsafePathError
from provisioning.homes import Home, Homes
from provisioning.rlimits import RunLimits
from provisioning.sandbox import DEFAULT_ENV_ALLOWLIST, run_identity

from . import prompts as P
from . import run_limits
from .commands import HELP_TEXT, Command, ParsedCommand, parse_command
from .config import CoreSettings
from .delivery import Deliverer
from .errors import RunnerError
from .files import check_in_home, paths_for_people, save_attachment
from .logs import mask
from .markdown import closed, split_markdown
from .message_queue import AlbumKey, MessageQueue, album_key
from .metrics import Metrics
from .model import (
    Attachment,
    Inbound,
    InboxState,
    Outgoing,
    ReplyKind,
    ReplyTarget,
    thread_group,
)
from .ports import (
    DeliveryError,
    FileTooLarge,
    PressResult,
    PressStatus,
    ResolvesFiles,
    SubmitResult,
    SubmitStatus,
    Surface,
)
from .progress import ProgressState, cost_text, summary
from .reporter import ProgressReporter
from .run_limits import hit_text
from .runner import RunHandle, RunnerBackend, RunRequest, RunResult
from .runner.base import LIMIT_HIT_FLAG, PROMPT_EVENTS
from .runner.killer import AccountKillError, kill_accounts
from .runner.procs import kill_all
from .scheduler import Lease, RunScheduler, Wait, WaitReason
from .store import (
    MessageRecord,
    NewReply,
    PromptRecord,
    ReplyRecord,
    RunOutcome,
    Store,
    StoreError,
    StoreRetry,
    utc_midnight,
)

log = logging.getLogger(__name__)
DAY_S = 24 * 3600  # the window of the new-conversation limits

INTERRUPTED_TEXT = (
    "⚠️ Your message was interrupted before it was answered (the gateway stopped or "
    "restarted). Please send it again."
)
RUN_OVER_TOAST = "This run has already ended."
STOP_AFTER_RESTART_TEXT = (
    "⏹️ Nothing left to stop: the run this was meant for ended when the gateway restarted."
)
NEW_WITH_TEXT = (
    "🆕 Started a fresh conversation: the agent won't remember earlier messages; what you "
    "sent with the command is its first message. Files in this conversation's home stay."
)
FILES_WITH_COMMAND_TEXT = (
    "📎 The file sent with this command was not read by the agent: send it again as a "
    "message of its own."
)
PASSED_ON_TEXT = (
    "Your answer reached the agent just before the gateway restarted; the run it answered "
    "was cut off by the restart (see above)."
)
# the outcomes /metrics counts runs by: the runner contract's failure codes and the
# gateway's own; any other code a runner prints is counted as "other" (the log and the
# stored outcome keep it)
RUN_OUTCOMES = frozenset(
    {
        "ok",
        "failed",
        "empty_response",
        "no_answer",
        "content_filtered",
        "interrupted",
        "timeout",
        "no_envelope",
        "bad_envelope",
        "answer_refused",
        "provisioning",
        "runner_missing",
        "gateway_error",
    }
)
ENDED_PROMPT_TEXT = (
    "The question this answered ended when the gateway restarted, so nothing was passed on "
    "to the agent. If it was a new message, send it again."
)
RUN_OVER_TEXT = "⏹️ This run has ended."  # a bubble pressed after its run (its Stop gone)
CLOSED_BUBBLES_KEPT = 4096  # Stop tokens of bubbles this process turned into summaries
DOWNLOAD_TRIES = 4  # a file the platform refused for a while (429, 5xx, a reset): tries in all
DOWNLOAD_WAIT_MAX_S = 30.0  # the longest wait between two tries (its Retry-After, or backoff)
HOMES_KEPT = 10_000  # homes of the conversations served last, kept resolved (least recent go)
# A message delivered in parts (a Telegram album: one update per photo, no count given) runs
# once no part came for PARTS_QUIET_S, and at the latest PARTS_WAIT_MAX_S after its first part
# reached the front of the queue. Telegram sends an album's parts within milliseconds.
PARTS_QUIET_S = 1.0
PARTS_WAIT_MAX_S = 5.0
# albums whose first part was answered without a run (refused as over the queue limit, or
# taken as the typed answer to a question): their later parts are closed without a word
CLOSED_ALBUMS_KEPT = 1024
MIB = 1024 * 1024  # sizes said to people in MB as Telegram counts them (its "20 MB" limit)
ABORT_WAIT_S = 2.0  # after the grace: how long cancelled tasks get to end, the backend to close
SHUTDOWN_TEXT = (
    "⚠️ The gateway is shutting down, so this run was stopped before it finished. "
    "Please send your message again in a minute."
)


@dataclass
class ActiveRun:
    message: MessageRecord
    run_id: int
    target: ReplyTarget
    handle: RunHandle | None = None
    progress: ProgressState = field(default_factory=ProgressState)
    prompts: dict[str, PromptRecord] = field(default_factory=dict)  # token -> pending
    prompt_replies: dict[str, int] = field(default_factory=dict)  # token -> its message's reply
    stop_token: str = field(default_factory=P.new_token)
    stopped_by: str | None = None
    shutdown: bool = False
    summary_shown: bool = False  # its bubble was turned into the summary (not "working")
    reporter: ProgressReporter | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    lease: Lease | None = None  # its run slot (parked while a prompt waits for its person)
    limits: RunLimits = field(default_factory=RunLimits)  # what it started under


@dataclass
class ConversationSlot:
    queue: MessageQueue = field(default_factory=MessageQueue)
    worker: asyncio.Task[None] | None = None
    active: ActiveRun | None = None
    last: RunHandle | None = None  # the previous run, until everything it started is gone
    # the message taken off the queue whose run is about to start (waiting for a run slot,
    # being recorded): a /stop then stops that run as it starts, and who asked
    next: MessageRecord | None = None
    stop_next: str | None = None
    told: bool = False  # told "queued"/"waiting" since the queue was last empty (one per burst)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)  # a message was queued
    joining: AlbumKey | None = None  # the message whose parts the worker is waiting for


class Engine:
    """The core's :class:`~bridge.ports.Gateway`."""

    def __init__(
        self,
        settings: CoreSettings,
        store: Store,
        homes: Homes,
        backend: RunnerBackend,
        metrics: Metrics,
        surfaces: Mapping[str, Surface],
        *,
        operators: Callable[[str, str], bool] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.homes = homes
        self.backend = backend
        self.metrics = metrics
        self.surfaces = dict(surfaces)
        # one retry for every write an acknowledged message is owed (a full disk is waited
        # out); stopping ends its pauses and its retrying
        self._retry = StoreRetry()
        self.deliverer = Deliverer(
            store, self.surfaces, metrics, self._home_path, self._retry, on_gone=self._chat_gone
        )
        # a conversation's slot lives while it has work (a run, a queue, a finished run's
        # leftovers to wait for); its home, and its home's name, are remembered a while longer
        self._slots: dict[int, ConversationSlot] = {}
        self._homes: OrderedDict[int, Home] = OrderedDict()
        self._home_names: OrderedDict[int, str] = OrderedDict()
        # (conversation, sender, album) -> the id of the part answered without a run
        self._closed_albums: OrderedDict[tuple[int, str, str], int] = OrderedDict()
        # the run slots, shared between people and teams (no one takes them all) and given
        # back by a run while it waits for its person's answer: see bridge/scheduler.py
        limits = settings.limits
        self._runs = RunScheduler(
            limits.max_concurrent_runs, limits.max_runs_per_user, limits.max_runs_per_team
        )
        self._run_limits = run_limits.from_settings(limits)  # each run's (processes...)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stop_tokens: dict[str, ActiveRun] = {}
        # bubbles that get their run's summary: a Stop pressed just too late must not
        # replace that summary with "this run has ended" (oldest forgotten first)
        self._closed_bubbles: OrderedDict[str, None] = OrderedDict()
        self._leftovers_killed = asyncio.Event()  # cleared while start() kills them
        self._leftovers_killed.set()
        self.stopping = False
        self.started = False
        self._tag_secret = b""

    # -- lifecycle ----------------------------------------------------------------------------

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s failed", task.get_name(), exc_info=task.exception())

    def _kill_tag(self, message_id: int) -> str:
        """The run tag of a message's run, derivable again after a crash (no write per run)."""
        return hmac.new(self._tag_secret, str(message_id).encode(), "sha256").hexdigest()[:24]

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
            _remember(self._closed_albums, album, 0, CLOSED_ALBUMS_KEPT)
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
                _remember(self._home_names, conversation_id, conv.home)
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
            prompt = _answered_prompt(msg, waiting.get(msg.conversation_id, []), numbered)
            if prompt is not None:
                # answered by this message: one typed after it runs, as it would have run
                waiting[msg.conversation_id].remove(prompt)
                self._spawn(self._answer_to_an_ended_prompt(msg, prompt), f"ended-{msg.id}")
                continue
            self._dispatch(msg, admitted=True)
        if accepted:
            log.info("requeued %d message(s) accepted before the restart", len(accepted))
        self.started = True

    async def _answer_to_an_ended_prompt(self, msg: MessageRecord, prompt: PromptRecord) -> None:
        """A typed answer the gateway stopped before passing on: its prompt's run is over,
        so it is not run as a new message (a typed secret would have gone to the agent as a
        prompt); a secret is redacted, and the person told to send it again if it was new."""
        if prompt.kind == "secret":
            await self._retry.run(
                functools.partial(self.store.redact_message, msg.id), f"redacting {msg.id}"
            )
        await self._finish_message(msg, InboxState.DONE, "choice", ENDED_PROMPT_TEXT)

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

    async def stop(self) -> None:
        """Stop intake, tell every conversation with a run in flight, stop those runs."""
        self.stopping = True
        self._runs.close()  # messages waiting for a run slot stop waiting: the next start runs them
        self._retry.stop()
        for slot in self._slots.values():  # a worker waiting for a message's parts stops it
            slot.arrived.set()
        active = [s.active for s in self._slots.values() if s.active is not None]
        for run in active:
            run.shutdown = True
        await asyncio.gather(
            *(run.handle.stop("shutdown") for run in active if run.handle is not None),
            return_exceptions=True,
        )
        # Let the turns record and deliver their "stopped" replies (workers take no new
        # message once stopping), then cancel whatever is left.
        workers = [s.worker for s in self._slots.values() if s.worker is not None]
        if workers:
            await asyncio.wait(workers, timeout=5)
        await self._settle_all()
        self.deliverer.closing = True
        for task in [*workers, *self._tasks]:
            task.cancel()
        await asyncio.gather(*workers, *list(self._tasks), return_exceptions=True)
        await self.backend.close()

    async def abort(self) -> None:
        """What :meth:`stop` left when the gateway's grace ran out: every conversation worker
        and engine task cancelled and awaited (bounded), the backend closed. Nothing is left
        to write to a store that is about to close; a message whose run was cut off stays
        ``running`` and the next start answers it "interrupted"."""
        self.stopping = True
        self._runs.close()
        self.deliverer.closing = True
        left = [s.worker for s in self._slots.values() if s.worker is not None]
        left += list(self._tasks)
        left = [t for t in left if not t.done()]
        for task in left:
            task.cancel()
        if left:
            _done, stuck = await asyncio.wait(left, timeout=ABORT_WAIT_S)
            for task in stuck:
                log.error("task %s did not end when cancelled", task.get_name())
        await self._kill_cut_off_runs()
        try:
            await asyncio.wait_for(self.backend.close(), ABORT_WAIT_S)
        except Exception as exc:  # closing is best effort here: the process is ending
            log.error("the runner backend did not close: %r", exc)

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

    # -- intake -------------------------------------------------------------------------------

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
            self.metrics.messages.labels(inbound.platform, "duplicate").inc()
            return SubmitResult(SubmitStatus.DUPLICATE, record.id)
        self.metrics.messages.labels(inbound.platform, "accepted").inc()
        self.deliverer.reachable(record.conversation_id)  # it wrote: it can be answered
        _remember(self._home_names, record.conversation_id, home)
        if self.started:
            if fresh_question:
                self._spawn(
                    self._notice(record, f"new:{record.id}", NEW_WITH_TEXT), f"new-{record.id}"
                )
            self._dispatch(record)
        return SubmitResult(SubmitStatus.ACCEPTED, record.id)

    def _slot(self, conversation_id: int) -> ConversationSlot:
        return self._slots.setdefault(conversation_id, ConversationSlot())

    def _forget_if_idle(self, conversation_id: int) -> None:
        """Drop a slot with no work left: every conversation ever served kept one (with its
        last run's handle, the whole answer included) for as long as the process ran."""
        slot = self._slots.get(conversation_id)
        if (
            slot is not None
            and slot.active is None
            and not slot.queue
            and slot.last is None
            and (slot.worker is None or slot.worker.done())
        ):
            del self._slots[conversation_id]

    @property
    def conversations_in_memory(self) -> int:
        """Conversations with work in this process (a run, a queue, leftovers to wait for)."""
        return len(self._slots)

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

    async def _close_unreachable(self, msg: MessageRecord, why: str) -> None:
        """Close ``msg`` unrun: its chat takes no more messages (see :meth:`_chat_gone`)."""
        self.metrics.messages.labels(msg.platform, "unreachable").inc()
        text = f"⛔ Not run: this chat takes no more of the bot's messages ({why})."
        await self._finish_message(msg, InboxState.FAILED, "unreachable", text)

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
            _remember(self._closed_albums, key, msg.id, CLOSED_ALBUMS_KEPT)

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
            result = _gateway_failure(exc, started=False)
            outcome = RunOutcome(
                ok=False, exit_code=None, envelope_code=result.code, error=result.error
            )
            reply = self._reply(
                msg, f"error:{msg.id}", Outgoing(ReplyKind.ERROR, _failure_text(result, None))
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

    # -- replies ------------------------------------------------------------------------------

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

    def _home_path(self, conversation_id: int) -> Path | None:
        home = self._homes.get(conversation_id)
        if home is not None:
            return home.path
        name = self._home_names.get(conversation_id)
        return self.homes.root.layout.home(name) if name else None

    # -- commands -----------------------------------------------------------------------------

    async def _command(self, msg: MessageRecord, parsed: ParsedCommand) -> None:
        try:
            await self._run_command(msg, parsed)
        finally:
            self._forget_if_idle(msg.conversation_id)

    async def _run_command(self, msg: MessageRecord, parsed: ParsedCommand) -> None:
        slot = self._slot(msg.conversation_id)
        command = parsed.command
        if command in (Command.HELP, Command.START):
            text = HELP_TEXT
        elif command is Command.NEW:
            # the epoch was bumped as /new was accepted (what came after it is of the fresh
            # conversation); the answer marks it done, so a replay answers it once
            running = slot.active is not None

            def answer(epoch: int) -> NewReply:
                text = (
                    f"🆕 Started a fresh conversation (#{epoch}): the agent won't remember "
                    "earlier messages. Files in this conversation's home stay."
                )
                if running:
                    text += " The run in progress finishes in the old conversation."
                key = f"command-{command.value}:{msg.id}"
                return self._reply(msg, key, Outgoing(ReplyKind.NOTICE, text))

            write = functools.partial(self.store.start_new_epoch, msg.id, answer)
            await self._deliver_written(write, f"the answer to message {msg.id}")
            return
        elif command is Command.STATUS:
            status = await self._retry.run(
                functools.partial(self._status_text, msg, slot), f"the status for {msg.id}"
            )
            if status is None:  # stopping: the next start answers it
                return
            text = status
        else:
            text = await self._stop_command(msg, slot)
        if msg.attachments:  # a file captioned with a command: said, not silently dropped
            text += f"\n\n{FILES_WITH_COMMAND_TEXT}"
        await self._finish_message(msg, InboxState.DONE, f"command-{command.value}", text)

    async def _status_text(self, msg: MessageRecord, slot: ConversationSlot) -> str:
        lines = []
        if slot.active is not None:
            who = slot.active.message.sender_name or slot.active.message.sender_id
            lines.append(f"**Running** (for {who}): {slot.active.progress.line()}")
        elif slot.next is not None:  # off the queue, its run not started yet
            caps = self._runs
            lines.append(
                "**Starting**: the next message waits for a run slot (the gateway runs at "
                f"most {caps.total} at once, {caps.per_user} per person and {caps.per_team} "
                "per team or chat) or for its parts."
            )
        else:
            lines.append("**Idle**: nothing is running in this conversation.")
        starting = 1 if slot.active is None and slot.next is not None else 0
        lines.append(f"Waiting: {slot.queue.waiting + starting} message(s).")
        conv = await self.store.conversation(msg.conversation_id)
        if conv is not None:
            lines.append(f"Conversation #{conv.epoch}.")
        runs = [r for r in await self.store.runs(msg.conversation_id, limit=5) if r.outcome]
        if runs and runs[0].outcome is not None:
            o = runs[0].outcome
            result = "ok" if o.ok else (o.envelope_code or "failed")
            lines.append(
                f"Last run: {result}, {o.total_tokens:,} tokens, "
                f"{cost_text(o.cost_usd, o.cost_known)}, {o.duration_ms / 1000:.1f}s."
            )
        cap = self.settings.limits.daily_cost_usd
        if cap is not None:
            spent, unpriced = await self.store.cost_since(utc_midnight())
            lines.append(f"Spend today: ${spent:.2f} of ${cap:.2f} ({unpriced} unpriced run(s)).")
        parked = self._runs.parked
        waiting = f" ({parked} of them waiting for a person's answer)" if parked else ""
        lines.append(f"Runs in flight across the gateway: {self._runs.held}{waiting}.")
        return "\n".join(lines)

    async def _stop_command(self, msg: MessageRecord, slot: ConversationSlot) -> str:
        run = slot.active
        starting = slot.next if run is None else run.message
        if starting is None:
            return "Nothing is running in this conversation."
        if msg.sender_id != starting.sender_id and not msg.is_operator:
            who = starting.sender_name or starting.sender_id
            return f"Only {who} (who started this run) or an operator can stop it."
        if run is None:  # about to start (waiting for a run slot): stopped as it starts
            slot.stop_next = msg.sender_name or msg.sender_id
            return "⏹️ Stopped: the run that was about to start stops as it starts."
        await self._stop_run(run, msg.sender_name or msg.sender_id)
        return "⏹️ Stopped."

    async def _stop_run(self, run: ActiveRun, by: str) -> None:
        run.stopped_by = by
        if run.handle is not None:
            await run.handle.stop("stopped")

    # -- prompts ------------------------------------------------------------------------------

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
            expired = Outgoing(ReplyKind.NOTICE, P.expired_text(record))
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

    def _numbered(self, run: ActiveRun) -> bool:
        """Whether the run's prompts were shown with numbered choices (no buttons): only
        then is a typed number a choice. With buttons, "3" typed to a question is the answer
        3 (not its third button), and typing never approves a tool."""
        return self._numbered_on(run.message.platform)

    def _numbered_on(self, platform: str) -> bool:
        surface = self.surfaces.get(platform)
        return not (surface and surface.capabilities.buttons)

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
            record, others_pending=others if record.kind == "approval" else 0, buttons=buttons
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
        await self._settle_prompt_message(run, record, P.unanswered_text(record, wait_s))

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

    # -- the turn -----------------------------------------------------------------------------

    async def _ensure_home(self, msg: MessageRecord) -> Home:
        # Once per conversation per process, again when the home was archived since (the
        # run is recorded as started by now, so it cannot be archived under us after this).
        home = self._homes.get(msg.conversation_id)
        if home is None or not await asyncio.to_thread(self.homes.present, home):
            home = await asyncio.to_thread(self.homes.ensure, msg.thread_key)
            await self.count_accounts()
        _remember(self._homes, msg.conversation_id, home)
        return home

    async def count_accounts(self) -> None:
        """``/metrics``' share of the uid range live conversation accounts hold (isolated);
        counted again at each scrape, since ``homes archive`` may give accounts back from
        another process."""
        registry = self.homes.registry
        if self.homes.isolated and registry is not None:
            used, capacity = await asyncio.to_thread(registry.usage)
            self.metrics.accounts_used.set(used)
            self.metrics.accounts_capacity.set(capacity)

    async def _acquire_slot(self, slot: ConversationSlot, msg: MessageRecord) -> Lease | None:
        """A run slot for ``msg`` within the gateway's, its person's and its team's caps
        (``limits.max_concurrent_runs``, ``max_runs_per_user``, ``max_runs_per_team``);
        None once the gateway is stopping. Told why it waits, once per burst."""

        async def tell(why: Wait) -> None:
            if not slot.told:
                slot.told = True
                await self._notice(msg, f"waiting:{msg.id}", _waiting_text(why))

        return await self._runs.acquire(run_person(msg), thread_group(msg.thread_key), tell)

    async def _turn(self, slot: ConversationSlot, msg: MessageRecord) -> None:
        if await self._refused(msg):
            return
        await self._leftovers_killed.wait()  # what the accounts ran before the start is gone
        if slot.last is not None:  # the previous run's leftovers are gone before this one
            last, slot.last = slot.last, None  # (waited for without holding a run slot)
            await last.settled()
        lease = await self._acquire_slot(slot, msg)
        if lease is None:  # it waited while the gateway began to stop: the next start runs it
            return
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.metrics.runs_in_flight.dec()
                self._runs.release(lease)

        self.metrics.runs_in_flight.inc()
        try:
            if self.stopping:  # the gateway began to stop as the slot came: the next start runs it
                return
            # checked again with the run slot held: while this message waited for it, a run
            # that ended may have taken the day's spend over the cap (its cost is recorded
            # before its slot is given back), or its chat was found to take no more messages
            if await self._refused(msg, release):
                return
            ran = await self._run_turn(slot, msg, lease)
            if ran is None:
                return
            try:
                # the outcome (its cost) is recorded before the run slot is given back, then
                # the answer is sent with the slot free for the next run
                records = await self._record(*ran)
                release()
                if records is not None:
                    await self._answer(*ran, records)
            finally:
                if not ran[0].summary_shown:  # its bubble (if any) still reads "working":
                    self._closed_bubbles.pop(ran[0].stop_token, None)  # a Stop settles it
        finally:
            release()

    async def _refused(self, msg: MessageRecord, release: Callable[[], None] | None = None) -> bool:
        """Close ``msg`` without a run when its chat takes no more messages (known since it
        was queued: a message from the chat would have made it reachable again), or answer
        it with the daily cap's refusal when no new run may start today; whether it was.
        ``release``: the run slot held, given back before the answer is sent."""
        why = self.deliverer.gone(msg.conversation_id)
        over = None if why is not None else await self._over_budget()
        too_many = None if why or over else await self._too_many_new(msg)
        if why is None and over is None and too_many is None:
            return False
        if release is not None:
            release()
        if why is not None:
            await self._close_unreachable(msg, why)
            return True
        if too_many is not None:
            await self._finish_message(msg, InboxState.FAILED, "new-limit", too_many)
            return True
        await self._finish_message(
            msg,
            InboxState.FAILED,
            "budget",
            f"💸 Today's spending limit for this gateway is reached ({over}); new messages "
            "run again after midnight UTC.",
        )
        return True

    async def _too_many_new(self, msg: MessageRecord) -> str | None:
        """Why ``msg`` may not start a new conversation (each one is an account, kept for
        good), or None: its sender, or its team or chat, started the most allowed in the
        last 24 hours (``accounts.new_per_user_per_day``, ``new_per_team_per_day``)."""
        cfg = self.settings.accounts
        if msg.conversation_id in self._homes or not (
            cfg.new_per_user_per_day or cfg.new_per_team_per_day
        ):
            return None
        group = thread_group(msg.thread_key)
        ran, mine, team = await self.store.conversations_started(
            msg.conversation_id, msg.sender_id, group, time.time() - DAY_S
        )
        if ran:
            return None
        if cfg.new_per_user_per_day and mine >= cfg.new_per_user_per_day:
            who = f"You have started {mine} new conversations"
        elif cfg.new_per_team_per_day and team >= cfg.new_per_team_per_day:
            who = f"This team or chat has started {team} new conversations"
        else:
            return None
        log.warning(
            "new conversation %s refused: %s started %d, %s %d in 24 h",
            msg.thread_key,
            msg.sender_id,
            mine,
            group,
            team,
        )
        return (
            f"🚫 {who} in the last 24 hours, the most this gateway allows; this one was not "
            "started. Continue one of your conversations, or ask an operator to raise the "
            "limit (accounts.new_per_user_per_day, new_per_team_per_day)."
        )

    async def _over_budget(self) -> str | None:
        """Why no new run may start today (the daily cap), or None."""
        cap = self.settings.limits.daily_cost_usd
        if cap is None:
            return None
        spent, unpriced = await self.store.cost_since(utc_midnight())
        if spent >= cap:
            return f"${spent:.2f} spent of ${cap:.2f}"
        if unpriced:
            return f"{unpriced} run(s) today had no price, so the spend is unknown"
        return None

    async def _settle_all(self) -> None:
        """Wait (bounded) until no finished run has processes left (runs sweep after wait)."""
        last = [s.last for s in self._slots.values() if s.last is not None]
        if last:
            settling = [asyncio.ensure_future(h.settled()) for h in last]
            _done, pending = await asyncio.wait(settling, timeout=5)
            for task in pending:
                task.cancel()
            await asyncio.gather(*settling, return_exceptions=True)

    async def _run_turn(
        self, slot: ConversationSlot, msg: MessageRecord, lease: Lease | None = None
    ) -> tuple[ActiveRun, RunResult] | None:
        """Start and run one message; its run and result, or None when it had begun before.

        ``limits.max_concurrent_runs`` counts runs: the caller records the outcome with the
        run slot held (the next run's cap check counts its cost) and sends the answer after
        giving the slot back. ``lease``: that slot, parked while a prompt of the run waits
        for its person (:meth:`_park`).
        """
        run_record = await self.store.begin_run(msg.id, msg.sender_id, parts=msg.merged)
        if run_record is None:  # no longer accepted: started or answered already
            return None
        epoch = run_record.epoch
        run = ActiveRun(message=msg, run_id=run_record.id, target=self._target(msg), lease=lease)
        run.stopped_by, slot.stop_next = slot.stop_next, None  # a /stop before it started
        slot.next = None
        slot.active = run
        self._stop_tokens[run.stop_token] = run
        reporter: asyncio.Task[None] | None = None
        try:
            try:
                home = await self._ensure_home(msg)
                paths = await self._attachments(home, msg)
            except (ProvisioningError, OSError, DeliveryError) as exc:
                log.error("cannot prepare the home of %s: %s", msg.thread_key, exc)
                return run, _not_run("provisioning", str(exc))
            surface = self.surfaces.get(msg.platform)
            if surface is not None:
                run.reporter = ProgressReporter(
                    surface,
                    run.target,
                    run.progress,
                    self.settings.progress,
                    run_id=run.run_id,
                    requester=msg.sender_id,
                    stop_token=f"{run.stop_token}{P.SEP}{P.STOP}",
                )
                reporter = asyncio.create_task(run.reporter.run(), name=f"progress-{run.run_id}")
            return run, await self._execute(run, home, epoch, paths)
        except Exception as exc:  # recorded as started, so it is answered: a failed run
            log.exception("the run of message %d of %s failed", msg.id, msg.thread_key)
            if run.handle is not None:  # what it started is ended, and gone before the next run
                slot.last = run.handle
                with contextlib.suppress(Exception):
                    await run.handle.stop("failed")
            return run, _gateway_failure(exc, started=run.handle is not None)
        finally:
            run.done.set()
            if run.reporter is not None:
                run.reporter.done.set()
            if reporter is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await reporter
            slot.active = None
            self._stop_tokens.pop(run.stop_token, None)
            if run.reporter is not None and run.reporter.bubble_ref is not None:
                self._closed_bubbles[run.stop_token] = None
                while len(self._closed_bubbles) > CLOSED_BUBBLES_KEPT:
                    self._closed_bubbles.popitem(last=False)

    async def _attachments(self, home: Home, msg: MessageRecord) -> list[str]:
        if not msg.attachments:
            return []
        surface = self.surfaces.get(msg.platform)
        cap = self.settings.limits.max_attachment_bytes
        files = [Attachment.from_dict(raw) for raw in msg.attachments]
        paths: list[str] = []
        left_out: list[tuple[Attachment, DeliveryError]] = []
        for att in files:
            try:
                if att.size is not None and att.size > cap:
                    raise FileTooLarge(att.name, cap, att.size)
                if surface is None:
                    raise DeliveryError(f"no surface {msg.platform} to download {att.name} from")
                att, data = await self._download(surface, att, cap)
            except DeliveryError as exc:
                # one of several files (an album, say: a phone's video is often over the
                # Bot API's 20 MB; or a file deleted since it was shared): the run gets those
                # that came, the person hears which did not and why
                if len(files) == 1 or self.stopping:
                    raise
                left_out.append((att, exc))
                continue
            paths.append(await asyncio.to_thread(save_attachment, home, msg.id, att.name, data))
        if left_out:
            if not paths:
                raise left_out[0][1]  # nothing came: refused, as one file that cannot come is
            await self._notice(msg, f"left-out:{msg.id}", _left_out_text(left_out))
        return paths

    async def _download(
        self, surface: Surface, att: Attachment, cap: int
    ) -> tuple[Attachment, bytes]:
        """One attached file, completed by a surface that sends some without their name
        (the name it is saved under), and its bytes; a refusal that is not permanent (flood
        control, a 5xx, a lost connection) is waited out and tried again (bounded) before
        the turn gives up."""
        for attempt in range(1, DOWNLOAD_TRIES + 1):
            try:
                if isinstance(surface, ResolvesFiles):
                    att = await surface.resolve(att)
                    if att.size is not None and att.size > cap:
                        raise FileTooLarge(att.name, cap, att.size)
                return att, await surface.download(att, cap)
            except DeliveryError as exc:
                if exc.permanent or attempt == DOWNLOAD_TRIES or self.stopping:
                    raise
                wait = min(exc.retry_after or 2.0 ** (attempt - 1), DOWNLOAD_WAIT_MAX_S)
                log.info("downloading %s failed (%s); again in %.0fs", att.name, exc, wait)
                await asyncio.sleep(wait)  # the platform's pace or a backoff, bounded
        raise AssertionError("unreachable")  # the last try returned or raised

    async def _execute(
        self, run: ActiveRun, home: Home, epoch: int, attachments: list[str]
    ) -> RunResult:
        cfg = self.settings.runner
        msg = run.message
        identity = run_identity(
            home,
            surface=msg.platform,
            allowlist=(*DEFAULT_ENV_ALLOWLIST, *cfg.env_passthrough),
            extra_env=cfg.extra_env,
            limits=self._run_limits,
        )
        run.limits = identity.limits
        prompt = msg.text
        if attachments and self.backend.runs_in_workspace:
            # named from the run's working directory (the workspace), not by paths of the
            # root: an agent quotes what it was told to the person
            workspace = home.path / "workspace"
            attachments = [os.path.relpath(p, workspace) for p in attachments]
            prompt += "\n\nAttached files (paths relative to the working directory):\n"
            prompt += "\n".join(f"- {p}" for p in attachments)
        elif attachments:
            prompt += "\n\nAttached files:\n" + "\n".join(f"- {p}" for p in attachments)
        request = RunRequest(
            home=home,
            identity=identity,
            conversation=conversation_name(msg.thread_key, epoch),
            prompt=prompt,
            agent=cfg.agent,
            approval_policy=cfg.approval_policy,
            timeout_s=cfg.timeout_s,
            events=tuple(cfg.events),
            attachments=tuple(attachments),
            kill_tag=self._kill_tag(msg.id),
        )
        if run.stopped_by is not None:  # a /stop came before it began: nothing is started
            return replace(_not_run("interrupted", "stopped before it started"), stopped=True)
        try:
            run.handle = await self.backend.start(request)
        except RunnerError as exc:
            return _not_run("runner_missing", str(exc))
        if run.shutdown:
            await run.handle.stop("shutdown")
        elif run.stopped_by is not None:  # /stop or Stop came while the run was starting
            await run.handle.stop("stopped")
        async for event in run.handle.events():
            run.progress.update(event)
            if event.type in PROMPT_EVENTS:
                try:
                    await self._on_prompt(run, event.type, event.data)
                except Exception:  # _on_prompt declines what it could not show; this is a bug
                    log.exception("a prompt of %s could not be handled", msg.thread_key)
        result = await run.handle.wait()
        self._slot(msg.conversation_id).last = run.handle
        if run.prompts:
            try:
                await self.store.expire_prompts(run.run_id)
            except StoreError as exc:  # the next start expires what is left
                log.warning("prompts of run %d not expired: %s", run.run_id, exc)
            for rec in list(run.prompts.values()):  # their buttons go: nobody can answer now
                await self._settle_prompt_message(run, rec, P.expired_text(rec))
        return result

    async def _record(self, run: ActiveRun, result: RunResult) -> list[ReplyRecord] | None:
        """Record a run's outcome and replies (its cost counts from now); what to deliver,
        or None when the gateway stopped first."""
        msg = run.message
        outcome = RunOutcome(
            ok=result.ok,
            exit_code=result.exit_code,
            envelope_code=result.code,
            # stored, and shown by homes show and the ops pages: a provider's error may
            # quote its key (runner.extra_env)
            error=mask(result.error) if result.error else result.error,
            cost_usd=result.cost_usd,
            cost_known=result.cost_known,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
            total_tokens=result.total_tokens,
            duration_ms=result.duration_ms,
            tool_count=len(result.tool_calls) or sum(run.progress.tools.values()),
        )
        label = "ok" if result.ok else (result.code or "failed")
        # Stopped by the gateway's shutdown: "send it again", unless the run answered all
        # the same (it finished as the stop came): that answer is kept and delivered, now or
        # at the next start; the runner has it in its history already.
        interrupted = run.shutdown and not result.ok
        log.info(  # one structured line per turn (JSON keys in the service's log)
            "turn %s: %s in %.1fs",
            msg.thread_key,
            "interrupted" if interrupted else label,
            result.duration_ms / 1000,
            extra={
                "event": "turn",
                "thread_key": msg.thread_key,
                "platform": msg.platform,
                "run_id": run.run_id,
                "outcome": "interrupted" if interrupted else label,
                "duration_ms": result.duration_ms,
                "exit_code": result.exit_code,
                "cost_usd": result.cost_usd if result.cost_known else None,
                "total_tokens": result.total_tokens,
                "stopped_by": run.stopped_by,
            },
        )
        line = summary(result, run.progress)
        bubble = run.reporter is not None and run.reporter.bubble_ref is not None
        replies: list[NewReply] = []
        state = InboxState.DONE if result.ok else InboxState.FAILED
        surface = self.surfaces.get(msg.platform)
        limit = surface.capabilities.max_length if surface else 4000
        if interrupted:
            state = InboxState.INTERRUPTED
            replies.append(
                self._reply(msg, f"interrupted:{msg.id}", Outgoing(ReplyKind.NOTICE, SHUTDOWN_TEXT))
            )
        elif result.ok:
            body = result.answer
            asked = result.flags.get("unasked_question")
            if isinstance(asked, str) and asked.strip():
                # the released CLI cannot ask the person: its ask tool gave the agent ""
                question = " ".join(asked.split())
                question = question if len(question) <= 500 else f"{question[:499]}…"
                body = (
                    f"{closed(body)}\n\n❓ The agent wanted to ask “{question}” but this Jazz "
                    "CLI cannot ask in the chat, so it went on without an answer. You can "
                    "reply with your answer in a new message."
                )
            if not bubble:
                body = f"{closed(body)}\n\n_{line}_"
            # off the loop: a long answer takes a while to parse and split
            unit = surface.capabilities.length_unit if surface else "characters"
            parts = await asyncio.to_thread(split_markdown, body, limit - 16, unit)
            for i, part in enumerate(parts):
                out = Outgoing(ReplyKind.ANSWER, part, continues=i > 0)
                replies.append(self._reply(msg, f"answer:{msg.id}:{i}", out))
            home = self._home_path(msg.conversation_id)
            for i, art in enumerate(result.artifacts):
                path = art.get("path")
                if not isinstance(path, str) or not path or home is None:
                    continue
                name = os.path.basename(path)
                try:
                    inside = await asyncio.to_thread(check_in_home, home, path)
                except (UnsafePathError, OSError) as exc:
                    # the log names the runner's path; the chat, the file relative to the home
                    log.warning("artifact %s of %s refused: %s", path, msg.thread_key, exc)
                    out = Outgoing(ReplyKind.NOTICE, f"Artifact `{name}` not sent: {exc}")
                else:  # kept relative to the home: the web chat shows it
                    out = Outgoing(
                        ReplyKind.ARTIFACT, name, file_path=inside, media_type=art.get("mediaType")
                    )
                replies.append(self._reply(msg, f"artifact:{msg.id}:{i}", out))
        else:
            text = _failure_text(result, run.stopped_by, run.limits, self._run_limits)
            if not bubble:
                text += f"\n\n_{line}_"
            replies.append(self._reply(msg, f"error:{msg.id}", Outgoing(ReplyKind.ERROR, text)))
        records = await self._finish_run(run, outcome, state, replies)
        if records is None:
            return None  # stopping with the outcome unrecorded: the restart says "interrupted"
        # counted once recorded: a run in the metrics has its outcome and replies stored
        # a fixed set: the code is the runner's word, and every new value would be a new
        # time series kept for ever
        self.metrics.runs.labels(label if label in RUN_OUTCOMES else "other").inc()
        self.metrics.run_duration.observe(result.duration_ms / 1000)
        return records

    async def _answer(self, run: ActiveRun, result: RunResult, records: list[ReplyRecord]) -> None:
        """Close a recorded run's bubble with its summary, then deliver its replies."""
        line = summary(result, run.progress)
        if run.reporter is not None:
            run.summary_shown = await run.reporter.close(line)
        if not run.summary_shown:  # before the answer goes: a Stop pressed from now settles it
            self._closed_bubbles.pop(run.stop_token, None)
        await self.deliverer.deliver(records)

    async def _finish_run(
        self, run: ActiveRun, outcome: RunOutcome, state: InboxState, replies: list[NewReply]
    ) -> list[ReplyRecord] | None:
        """Record a run's outcome and replies; on a store failure (a full disk) try again.

        The message was acknowledged, so its answer must not be lost: the write is retried
        with a growing pause until it lands. Only when the gateway stops first is it left
        unrecorded; the message is still "running" in the store then, and the next start
        answers it with "interrupted, send again".
        """
        record = functools.partial(self.store.finish_run, run.run_id, outcome, state, replies)
        return await self._retry.run(record, f"run {run.run_id} of {run.message.thread_key}")


CONVERSATION_HASH_HEX = 20


def conversation_name(thread_key: str, epoch: int) -> str:
    """A run's ``RunRequest.conversation``: the thread and its epoch (``/new`` bumps it), as
    an opaque id (``c-<hash>-<epoch>``). It goes on the runner's command line, and a raw
    thread key there names the chat (a Slack channel, a Telegram user id) to anyone who can
    list processes."""
    return f"{conversation_prefix(thread_key)}{epoch}"


def conversation_prefix(thread_key: str) -> str:
    """What every :func:`conversation_name` of ``thread_key`` starts with."""
    return f"c-{naming.key_hash(thread_key)[:CONVERSATION_HASH_HEX]}-"


def _answered_prompt(
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


def run_person(msg: MessageRecord) -> str:
    """Whom a run counts against for ``limits.max_runs_per_user``: its sender, by the
    platform's own id (qualified by the platform: ids of two platforms are not one person).
    Its team is :func:`bridge.model.thread_group` of its thread key."""
    return f"{msg.platform}:{msg.sender_id}"


def _waiting_text(why: Wait) -> str:
    """The word to a message waiting for a run slot: why, and until when."""
    runs = f"{why.count} run{'' if why.count == 1 else 's'}"
    if why.reason is WaitReason.USER:
        return (
            f"🕐 You already have {runs} going (one waiting for your answer counts too), the "
            "most one person may have at once; this one starts as soon as one of them finishes."
        )
    if why.reason is WaitReason.TEAM:
        return (
            f"🕐 Your team or chat already has {runs} going, the most one team may have at "
            "once; this one starts as soon as one of them finishes."
        )
    return (
        f"🕐 The gateway is running {why.count} other run(s), its limit; yours starts as soon "
        "as one finishes."
    )


def _left_out_text(left_out: list[tuple[Attachment, DeliveryError]]) -> str:
    """The notice naming the files of a message the run went without, and why."""
    large = [e for _, e in left_out if isinstance(e, FileTooLarge)]
    lines = []
    if large:
        names = ", ".join(
            e.name if e.size is None else f"{e.name} ({e.size / MIB:.1f} MB)" for e in large
        )
        limit = min(e.limit for e in large)
        lines.append(f"⚠️ Left out, over the {limit / MIB:g} MB limit for files: {names}.")
    for att, exc in left_out:
        if not isinstance(exc, FileTooLarge):  # the error names the file, or it is named here
            why = str(exc).rstrip(".")
            lines.append(
                f"⚠️ Left out: {why}." if att.name in why else f"⚠️ Left out, {att.name}: {why}."
            )
    return "\n".join(lines)


def _remember(kept: OrderedDict[Any, Any], key: Any, value: Any, limit: int = HOMES_KEPT) -> None:
    """Note ``key`` as the most recent in ``kept``; the least recent go past ``limit``."""
    kept[key] = value
    kept.move_to_end(key)
    while len(kept) > limit:
        kept.popitem(last=False)


def _gateway_failure(exc: Exception, *, started: bool) -> RunResult:
    """A run the gateway itself failed (out of file descriptors, a bug): an answer, not silence."""
    doing = "follow" if started else "start"
    reason = str(exc) or type(exc).__name__
    error = f"the gateway could not {doing} the run: {reason}"
    if not started:
        return _not_run("gateway_error", error)
    return RunResult(ok=False, code="gateway_error", error=error)


def _not_run(code: str, error: str) -> RunResult:
    """A failure before any runner started: it cost nothing, and says so (a cost left
    unknown would count as an unpriced run against ``limits.daily_cost_usd`` and close the
    gateway to everyone for the rest of the day)."""
    return RunResult(ok=False, code=code, error=error, cost_usd=0.0, cost_known=True)


def _failure_text(
    result: RunResult,
    stopped_by: str | None,
    limits: RunLimits | None = None,
    whole: RunLimits | None = None,
) -> str:
    if stopped_by is not None:
        return f"⏹️ Stopped by {stopped_by}."
    if result.timed_out:
        return f"⌛ {result.error}. Try a smaller request, or ask an operator to raise the limit."
    reason = result.error or result.code or "the run failed"
    says_exit = result.code in ("no_envelope", "bad_envelope")  # the reason names it already
    detail = (
        f" (exit code {result.exit_code})"
        if result.exit_code not in (None, 0, 1) and not says_exit
        else ""
    )
    text = f"❌ The agent could not answer: {reason}{detail}."
    if result.code in ("no_envelope", "bad_envelope", "failed") and not result.stopped:
        # the released CLI's provider failure has no error event: its stack trace on stderr
        from .runner.envelope import useful_stderr

        lines = useful_stderr(result.stderr_tail, result.error)
        if lines:
            tail = mask("\n".join(lines))[-800:]  # masked whole, then cut
            text += f"\n\n```\n{tail}\n```"
    measured = result.flags.get(LIMIT_HIT_FLAG)
    hit = (
        None
        if limits is None
        else hit_text(limits, result.exit_code, result.stderr_tail, measured=measured, whole=whole)
    )
    if hit is not None and not result.stopped and not result.timed_out:
        text += f"\n\n{hit} Ask an operator to raise it if the task needs more."
    # what a runner printed goes to the chat: a key it was given (runner.extra_env) must not
    return mask(text)
