"""The durable store's interface: what the turn engine and the adapters may ask of state.

SQLite implements it (:mod:`bridge.store.sqlite`); a PostgreSQL store for several gateway
replicas can implement the same methods later. Every method is async: implementations do
their blocking I/O off the event loop. Each method that changes several rows does so in one
transaction, so after a crash the state is before or after it, never between.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..errors import BridgeError
from ..model import Inbound, InboxState, Outgoing, ReplyState, ReplyTarget


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


@dataclass(frozen=True)
class ConversationRecord:
    id: int
    thread_key: str
    platform: str
    home: str  # the home directory's name under chats/
    epoch: int  # bumped by /new; the Jazz conversation id is "<thread key>#<epoch>"
    created_at: float
    last_active_at: float
    target: dict[str, Any]  # the last reply context the adapter gave


@dataclass(frozen=True)
class MessageRecord:
    id: int
    conversation_id: int
    platform: str
    event_id: str
    thread_key: str
    sender_id: str
    sender_name: str | None
    text: str
    attachments: list[dict[str, Any]]
    shared_chat: bool
    is_operator: bool
    is_command: bool
    target: dict[str, Any]
    state: InboxState
    received_at: float
    started_at: float | None
    finished_at: float | None
    error: str | None
    part_of: str | None = None  # Inbound.part_of
    # it started a fresh conversation as it was accepted ("/new <question>": the question);
    # never the typed answer to a question of the run before it
    starts_epoch: bool = False
    # not stored: the other parts the engine joined to this one (their ids); whatever starts
    # or closes this message closes them as MERGED in the same write
    merged: tuple[int, ...] = ()


@dataclass(frozen=True)
class RunOutcome:
    ok: bool
    exit_code: int | None
    envelope_code: str | None
    error: str | None = None
    cost_usd: float = 0.0
    cost_known: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    duration_ms: int = 0
    tool_count: int = 0


@dataclass(frozen=True)
class RunRecord:
    id: int
    conversation_id: int
    message_id: int
    requester: str
    epoch: int
    started_at: float
    finished_at: float | None
    outcome: RunOutcome | None  # None while the run is in flight


@dataclass(frozen=True)
class NewReply:
    """A reply to record. ``dedupe_key`` is unique: recording it twice returns the first."""

    dedupe_key: str
    conversation_id: int
    outgoing: Outgoing
    target: ReplyTarget
    message_id: int | None = None


@dataclass(frozen=True)
class ReplyRecord:
    id: int
    dedupe_key: str
    conversation_id: int
    message_id: int | None
    outgoing: Outgoing
    target: ReplyTarget
    state: ReplyState
    attempts: int
    created_at: float
    sent_at: float | None
    platform_ref: str | None
    last_error: str | None


@dataclass(frozen=True)
class PromptRecord:
    token: str  # opaque, unguessable; what a button carries
    run_id: int
    conversation_id: int
    requester: str
    kind: str  # approval | input | secret
    request_id: str  # toolCallId or requestId from the runner
    payload: dict[str, Any] = field(default_factory=dict)
    state: str = "pending"  # pending | answered | expired
    created_at: float = 0.0
    answered_at: float | None = None
    answer: dict[str, Any] | None = None


@dataclass(frozen=True)
class TranscriptEntry:
    """One line of a thread as a person saw it (the web chat reads these)."""

    role: str  # user | assistant | status | prompt | error
    text: str
    at: float
    sender: str | None = None
    message_id: int | None = None
    reply_id: int | None = None
    choices: list[dict[str, Any]] = field(default_factory=list)
    file_path: str | None = None


class Store(abc.ABC):
    """Durable state. See the module docstring."""

    @abc.abstractmethod
    async def open(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    # -- intake -----------------------------------------------------------------------------
    @abc.abstractmethod
    async def accept(
        self, inbound: Inbound, *, home: str, is_command: bool, starts_epoch: bool = False
    ) -> tuple[MessageRecord, bool]:
        """Persist an inbound message (and its conversation) durably.

        ``starts_epoch`` (a ``/new``): the conversation's epoch is bumped in the same
        transaction, so every message accepted after it belongs to the fresh conversation
        however soon it comes; :meth:`start_new_epoch` answers it later.

        Returns ``(record, True)`` when new; ``(existing record, False)`` when this
        ``(platform, event_id)`` was already accepted (a redelivery).
        """

    @abc.abstractmethod
    async def get_message(self, message_id: int) -> MessageRecord | None: ...

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
    async def count_in_state(self, conversation_id: int, state: InboxState) -> int: ...

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
        ``merged`` in the same transaction when still ``accepted``.
        """

    @abc.abstractmethod
    async def redact_message(self, message_id: int, text: str = "[redacted]") -> None:
        """Replace a message's stored text (a secret typed in a private chat)."""

    # -- conversations ----------------------------------------------------------------------
    @abc.abstractmethod
    async def conversation(self, conversation_id: int) -> ConversationRecord | None: ...

    @abc.abstractmethod
    async def conversation_by_key(self, thread_key: str) -> ConversationRecord | None: ...

    @abc.abstractmethod
    async def conversations(self) -> list[ConversationRecord]: ...

    @abc.abstractmethod
    async def latest_conversation(self, key_prefix: str) -> ConversationRecord | None:
        """The most recently active conversation whose thread key starts with ``key_prefix``."""

    @abc.abstractmethod
    async def new_epoch(self, conversation_id: int) -> int:
        """Start a fresh Jazz conversation in the same home; returns the new epoch."""

    @abc.abstractmethod
    async def start_new_epoch(
        self, message_id: int, reply: Callable[[int], NewReply]
    ) -> list[ReplyRecord]:
        """``/new``: mark the message done and record ``reply(its epoch)``, in one
        transaction. The epoch was bumped when it was accepted (``starts_epoch``); one
        accepted by an older jazz-bridge, which bumped it only here, is bumped now.

        A message no longer ``accepted`` (answered already: a replay) bumps nothing; its
        replies as recorded are returned.
        """

    # -- runs -------------------------------------------------------------------------------
    @abc.abstractmethod
    async def start_run(self, message_id: int, requester: str, epoch: int) -> RunRecord:
        """Mark the message running and record a run, in one transaction."""

    async def begin_run(
        self, message_id: int, requester: str, *, parts: Sequence[int] = ()
    ) -> RunRecord | None:
        """Start a run of an accepted message at its conversation's current epoch.

        None when the message is no longer ``accepted`` (already started or finished).
        ``parts``: the other parts of the same message, which this run answers too: closed
        as ``merged``. The default composes the calls above; a store overrides it with one
        transaction (the turn engine calls it once per message).
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
        """Record the outcome, the message's final state and its replies, in one transaction."""

    @abc.abstractmethod
    async def runs(self, conversation_id: int, limit: int = 20) -> list[RunRecord]:
        """Newest first."""

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
        """(sum of known costUSD, number of unpriced runs) of runs finished since ``since``."""

    @abc.abstractmethod
    async def prune(self, before: float) -> dict[str, int]:
        """Delete records older than ``before`` (retention), in one transaction.

        Runs finished, replies sent or failed, messages answered, and the prompts of pruned
        runs. Never a reply not yet delivered, a message not yet answered (nor one a kept run
        or reply points to), a run in flight or a pending prompt. Returns counts per table.
        """

    # -- replies ----------------------------------------------------------------------------
    @abc.abstractmethod
    async def add_replies(self, replies: list[NewReply]) -> list[ReplyRecord]:
        """Record replies (existing dedupe keys return the existing record), in order."""

    @abc.abstractmethod
    async def mark_reply(
        self,
        reply_id: int,
        state: ReplyState,
        *,
        platform_ref: str | None = None,
        error: str | None = None,
    ) -> None:
        """Move a reply to ``state``; SENDING also counts an attempt."""

    @abc.abstractmethod
    async def undelivered_replies(self) -> list[ReplyRecord]:
        """Replies PENDING or SENDING, oldest first (recovery)."""

    @abc.abstractmethod
    async def get_reply(self, reply_id: int) -> ReplyRecord | None: ...

    @abc.abstractmethod
    async def transcript(self, thread_key: str, limit: int = 500) -> list[TranscriptEntry]:
        """A thread's user messages and replies in the order they happened."""

    # -- prompts ----------------------------------------------------------------------------
    @abc.abstractmethod
    async def add_prompts(self, prompts: list[PromptRecord]) -> None: ...

    @abc.abstractmethod
    async def get_prompt(self, token: str) -> PromptRecord | None: ...

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
        not) atomically; False when it was not pending (stale, answered)."""

    @abc.abstractmethod
    async def expire_prompts(self, run_id: int | None = None) -> int:
        """pending -> expired for one run (or all runs, at start); returns how many."""

    @abc.abstractmethod
    async def pending_prompts(self, conversation_id: int | None) -> list[PromptRecord]:
        """Prompts still waiting for a person, oldest first: one conversation's, or (None)
        every conversation's in one read (the start looks at them all)."""

    # -- small adapter state ----------------------------------------------------------------
    @abc.abstractmethod
    async def get_kv(self, key: str) -> str | None: ...

    @abc.abstractmethod
    async def set_kv(self, key: str, value: str) -> None: ...


def utc_midnight() -> float:
    """The start of the current UTC day: where the daily spend cap's count begins."""
    now = datetime.now(UTC)
    return now.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
