"""The store contract: what the turn engine and the adapters may ask of durable state, and
what every backend guarantees in answer.

SQLite implements it (:mod:`bridge.store.sqlite`); a PostgreSQL store for several gateway
replicas can implement the same methods later. ``tests/bridge/store`` is the contract's
test suite: a backend is one more parameter of its ``store`` fixture, and must pass it all.

Every backend guarantees, for every method:

* **Async, off the loop.** Every method is a coroutine; blocking I/O runs off the event
  loop. Any number of tasks may call at once: each call is isolated from the others.
* **Durable once it returns.** A write that returned is on stable storage: it survives the
  process's crash and a power cut (an inbound message is acknowledged to its platform only
  after :meth:`Store.accept` returned). Another process opening the store sees it.
* **One transaction per write.** A method that changes several rows changes them in one
  transaction: after a crash the state is before or after it, never between. A write that
  raised changed nothing. A write whose caller stopped waiting (its task was cancelled)
  stands or falls whole.
* **Reads see the writes that returned** before they were called.
* **Errors say whether to try again.** :class:`StoreUnavailable` (and :class:`StoreFull`):
  the write was *not* made and the same write may succeed later, so
  :class:`~bridge.store.retry.StoreRetry` repeats it. Any other :class:`StoreError` (a row
  that is not there, a constraint) would fail the same way again and is not repeated.
  :class:`StoreSchemaTooNew`: the data was written by a newer jazz-bridge and is left
  untouched.
* **Order.** Ids are positive and grow in the order rows were written; "oldest first" and
  "newest first" are that order.

**Ambiguous commits.** A backend whose commit can end without it knowing whether it
landed (a network database losing its connection during ``COMMIT``) must settle that before
it answers: it raises :class:`StoreUnavailable` only for a write it knows was not made, and
a write that landed answers as it would have. The reason is the repeat: a write answered
``StoreUnavailable`` is made again, and so may be one whose caller gave up waiting. Most
writes are written so that making one again after it landed leaves the state as one write
left it, and answers as the first did (each method says what its repeat does):
:meth:`~Store.accept`, :meth:`~Store.complete_message`, :meth:`~Store.redact_message`,
:meth:`~Store.saved_attachments`,
:meth:`~Store.start_new_epoch`, :meth:`~Store.finish_run`, :meth:`~Store.add_replies`,
:meth:`~Store.prune`, :meth:`~Store.expire_prompts` and :meth:`~Store.set_kv`. The others are
not, and rely on the rule above: :meth:`~Store.new_epoch` and :meth:`~Store.start_run` would
do it twice, :meth:`~Store.begin_run` and :meth:`~Store.resolve_prompt` would answer "not
any more" to the caller whose write it was, :meth:`~Store.mark_reply` counts each
``SENDING`` as an attempt, and :meth:`~Store.add_prompts` refuses a token already there.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..errors import BridgeError
from ..model import Inbound, InboxState, ReplyState
from .records import (
    ConversationRecord,
    MessageRecord,
    NewReply,
    PromptRecord,
    ReplyRecord,
    RunOutcome,
    RunRecord,
    TranscriptEntry,
)


class StoreError(BridgeError):
    """The store cannot be opened, read or written."""


class StoreSchemaTooNew(StoreError):
    """The database was written by a newer jazz-bridge; it is refused and left untouched."""


class StoreUnavailable(StoreError):
    """The store cannot be written right now (a full disk, a lock held too long, an I/O
    error): the write was not made, and the same write may succeed later. Other store
    errors (a row that is not there, a constraint) will not: they are not retried."""


class StoreFull(StoreUnavailable):
    """The disk holding the store is full: the write was not made (intake answers 507)."""


@dataclass
class StoreStats:
    """What a store has done since it opened: for ``/metrics`` and the benchmarks."""

    commits: int = 0  # durable transactions (each one disk flush with synchronous=FULL)
    writes: int = 0  # write calls they held (a group commit holds several)


class Store(abc.ABC):
    """Durable state: the guarantees of the module docstring, and each method's own."""

    stats: StoreStats

    @abc.abstractmethod
    async def open(self) -> None:
        """Make the store ready: created when missing, an older schema migrated.

        :class:`StoreSchemaTooNew` for data of a newer jazz-bridge, which is left untouched,
        and the store is not open after it. Opening an open store does nothing.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Finish the calls already made (their writes are committed), then close.

        Every call made before :meth:`open` or after this raises :class:`StoreError`.
        """

    # -- intake -----------------------------------------------------------------------------
    @abc.abstractmethod
    async def accept(
        self, inbound: Inbound, *, home: str, is_command: bool, starts_epoch: bool = False
    ) -> tuple[MessageRecord, bool]:
        """Persist an inbound message (and its conversation) durably, ``accepted``.

        The first message of a thread key makes its conversation (epoch 1, in ``home``);
        a later one updates its last activity and reply target, never its home.
        ``starts_epoch`` (a ``/new``): the conversation's epoch is bumped in the same
        transaction, so every message accepted after it belongs to the fresh conversation
        however soon it comes; :meth:`start_new_epoch` answers it later.

        Returns ``(record, True)`` when new; ``(existing record, False)`` when this
        ``(platform, event_id)`` was already accepted (a redelivery, or the repeat of this
        write): the stored message and its conversation are left exactly as they were.
        Concurrent accepts of one event make one message.
        """

    @abc.abstractmethod
    async def get_message(self, message_id: int) -> MessageRecord | None:
        """The message, or None when there is none (never was, or pruned)."""

    @abc.abstractmethod
    async def messages_in_state(self, state: InboxState) -> list[MessageRecord]:
        """Messages in ``state``, oldest first (recovery)."""

    @abc.abstractmethod
    async def unanswered_messages(self) -> list[MessageRecord]:
        """Messages ``interrupted`` or ``failed`` with no reply recorded, oldest first.

        Recovery: each was acknowledged, so each still gets its one reply (none should be
        left so, but a gateway that stopped between two writes could leave one).
        """

    @abc.abstractmethod
    async def count_in_state(self, conversation_id: int, state: InboxState) -> int:
        """How many of the conversation's messages are in ``state``."""

    @abc.abstractmethod
    async def complete_message(
        self,
        message_id: int,
        state: InboxState,
        replies: list[NewReply],
        error: str | None = None,
        *,
        parts: Sequence[int] = (),
    ) -> list[ReplyRecord]:
        """Set a message's final state and record its replies, in one transaction.

        ``parts``: other parts of the same message (:attr:`MessageRecord.merged`), closed as
        ``merged`` in the same transaction when still ``accepted``. :class:`StoreError` when
        there is no such message (nothing is written). Repeated: the same state, and the
        replies recorded the first time (:meth:`add_replies`).
        """

    @abc.abstractmethod
    async def saved_attachments(self, message_id: int, attachments: list[dict[str, Any]]) -> None:
        """Replace a message's attachments with ``attachments``: the same files, each saved
        into the home with its ``local_path`` (the web chat's page links a person's own
        files so, :attr:`TranscriptEntry.attachments`). Repeated: the same attachments."""

    @abc.abstractmethod
    async def redact_message(self, message_id: int, text: str = "[redacted]") -> None:
        """Replace a message's stored text (a secret typed in a private chat).

        The old text is left in none of the store's files once this returns (a log of
        writes, a freed page), as far as no reader still holds an older view. Repeated:
        the same text.
        """

    # -- conversations ----------------------------------------------------------------------
    @abc.abstractmethod
    async def conversation(self, conversation_id: int) -> ConversationRecord | None:
        """The conversation, or None."""

    @abc.abstractmethod
    async def conversation_by_key(self, thread_key: str) -> ConversationRecord | None:
        """The conversation of a thread key, or None."""

    @abc.abstractmethod
    async def conversations(self) -> list[ConversationRecord]:
        """Every conversation, oldest first."""

    @abc.abstractmethod
    async def latest_conversation(self, key_prefix: str) -> ConversationRecord | None:
        """The most recently active conversation whose thread key starts with ``key_prefix``
        (taken literally: no character in it is a wildcard), or None."""

    @abc.abstractmethod
    async def new_epoch(self, conversation_id: int) -> int:
        """Start a fresh Jazz conversation in the same home; returns the new epoch.

        :class:`StoreError` when there is no such conversation. Each call bumps again.
        """

    @abc.abstractmethod
    async def start_new_epoch(
        self, message_id: int, reply: Callable[[int], NewReply]
    ) -> list[ReplyRecord]:
        """``/new``: mark the message done and record ``reply(its epoch)``, in one
        transaction. The epoch was bumped when it was accepted (``starts_epoch``); one
        accepted by an older jazz-bridge, which bumped it only here, is bumped now.

        A message no longer ``accepted`` (answered already: a replay, or the repeat of this
        write) bumps nothing; its replies as recorded are returned. :class:`StoreError` when
        there is no such message.
        """

    # -- runs -------------------------------------------------------------------------------
    @abc.abstractmethod
    async def start_run(self, message_id: int, requester: str, epoch: int) -> RunRecord:
        """Mark the message running and record a run, in one transaction.

        :class:`StoreError` when there is no such message. Each call records another run.
        """

    async def begin_run(
        self, message_id: int, requester: str, *, parts: Sequence[int] = ()
    ) -> RunRecord | None:
        """Start a run of an accepted message in the epoch it was written in (the
        conversation's current one for a message older stores did not give one).

        None when the message is no longer ``accepted`` (already started or finished: what
        a repeat answers). ``parts``: the other parts of the same message, which this run
        answers too: closed as ``merged``. The default composes the calls above; a store
        overrides it with one transaction (the turn engine calls it once per message).
        """
        message = await self.get_message(message_id)
        if message is None or message.state is not InboxState.ACCEPTED:
            return None
        conv = await self.conversation(message.conversation_id)
        run = await self.start_run(message_id, requester, conv.epoch if conv else 1)
        for part in parts:
            current = await self.get_message(part)
            if current is not None and current.state is InboxState.ACCEPTED:
                await self.complete_message(part, InboxState.MERGED, [])
        return run

    @abc.abstractmethod
    async def finish_run(
        self,
        run_id: int,
        outcome: RunOutcome,
        message_state: InboxState,
        replies: list[NewReply],
    ) -> list[ReplyRecord]:
        """Record the outcome, the message's final state and its replies, in one transaction.

        All or nothing: a reply that cannot be recorded leaves the run in flight and its
        message running. :class:`StoreError` when there is no such run. Repeated: the same
        outcome, and the replies recorded the first time.
        """

    @abc.abstractmethod
    async def runs(self, conversation_id: int, limit: int = 20) -> list[RunRecord]:
        """The conversation's latest ``limit`` runs, newest first."""

    @abc.abstractmethod
    async def conversations_started(
        self, conversation_id: int, requester: str, group: str, since: float
    ) -> tuple[bool, int, int]:
        """Whether conversation ``conversation_id`` has ever run, and how many conversations
        first seen since ``since`` have run, started (their first run asked) by
        ``requester`` and in ``group`` (its thread key or its threads' ``group:`` prefix,
        :func:`bridge.model.thread_group`): new conversations are limited per person and
        team (each is an account)."""

    @abc.abstractmethod
    async def cost_since(self, since: float) -> tuple[float, int]:
        """(sum of known costUSD, number of unpriced runs) of runs finished since ``since``;
        a run in flight is neither."""

    @abc.abstractmethod
    async def prune(self, before: float) -> dict[str, int]:
        """Delete records older than ``before`` (retention), in one transaction.

        Runs finished, replies sent or failed, messages answered, and the prompts of pruned
        runs. Never a reply not yet delivered, a message not yet answered (nor one a kept run
        or reply points to, nor the replies of a message a kept run holds), a run in flight
        or a pending prompt. Returns counts per table (``prompts``, ``runs``, ``replies``,
        ``messages``); repeated, it finds nothing more to delete.
        """

    # -- replies ----------------------------------------------------------------------------
    @abc.abstractmethod
    async def add_replies(self, replies: list[NewReply]) -> list[ReplyRecord]:
        """Record replies ``pending``, in order, all or none.

        A dedupe key already recorded returns the existing record as it is (whatever its
        state), so a repeat records nothing new.
        """

    @abc.abstractmethod
    async def mark_reply(
        self,
        reply_id: int,
        state: ReplyState,
        *,
        platform_ref: str | None = None,
        error: str | None = None,
        soon: bool = False,
    ) -> None:
        """Move a reply to ``state``; ``SENDING`` also counts an attempt (each time), ``SENT``
        records when. ``platform_ref`` and ``error`` are kept when not given again.

        ``soon``: the write may wait a moment (tens of milliseconds) to share the commit of
        the next write, so awaiting it takes that long; it returns, as always, once durable.
        For a caller that does not wait on it at once.

        :class:`StoreError` when there is no such reply.
        """

    @abc.abstractmethod
    async def undelivered_replies(self) -> list[ReplyRecord]:
        """Replies PENDING or SENDING, oldest first (recovery)."""

    @abc.abstractmethod
    async def get_reply(self, reply_id: int) -> ReplyRecord | None:
        """The reply, or None."""

    @abc.abstractmethod
    async def transcript(self, thread_key: str, limit: int = 500) -> list[TranscriptEntry]:
        """A thread's user messages and replies (not the failed ones) in the order they
        happened: by time, a message before a reply at the same time, then as recorded.
        The latest ``limit`` lines; none for a thread the store does not know."""

    # -- prompts ----------------------------------------------------------------------------
    @abc.abstractmethod
    async def add_prompts(self, prompts: list[PromptRecord]) -> None:
        """Record prompts (``created_at`` 0: now), all or none; a token already recorded is a
        :class:`StoreError`."""

    @abc.abstractmethod
    async def get_prompt(self, token: str) -> PromptRecord | None:
        """The prompt, or None."""

    @abc.abstractmethod
    async def albums_answered_without_run(self) -> list[tuple[int, str, str]]:
        """(conversation id, sender, album) of albums with parts still accepted whose
        earlier part was answered without a run (refused, or taken as a typed answer)."""

    @abc.abstractmethod
    async def answering_messages(self, message_ids: Sequence[int]) -> set[int]:
        """Those of ``message_ids`` recorded as the typed answer of a prompt (``byMessage``
        in the prompt's answer)."""

    @abc.abstractmethod
    async def resolve_prompt(
        self, token: str, answer: dict[str, Any], *, expired: bool = False
    ) -> bool:
        """pending -> answered (``expired``: -> expired, answered for the person who did
        not) atomically; False when it was not pending (stale, answered, no such token).
        Of concurrent resolutions of one prompt exactly one returns True."""

    @abc.abstractmethod
    async def expire_prompts(self, run_id: int | None = None) -> int:
        """pending -> expired for one run (or all runs, at start); returns how many (a
        repeat: none)."""

    @abc.abstractmethod
    async def pending_prompts(self, conversation_id: int | None) -> list[PromptRecord]:
        """Prompts still waiting for a person, oldest first: one conversation's, or (None)
        every conversation's in one read (the start looks at them all)."""

    # -- small adapter state ----------------------------------------------------------------
    @abc.abstractmethod
    async def get_kv(self, key: str) -> str | None:
        """The value last set for ``key``, or None."""

    @abc.abstractmethod
    async def set_kv(self, key: str, value: str) -> None:
        """Set ``key`` to ``value`` (replacing any)."""


def utc_midnight() -> float:
    """The start of the current UTC day: where the daily spend cap's count begins."""
    now = datetime.now(UTC)
    return now.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
