"""The records the store hands back and takes: plain frozen dataclasses, the same whichever
backend holds them, so callers never see a row or a connection.

What each field means for the state it records is the store contract's business
(:mod:`bridge.store.base`); a backend converts its rows to these and back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model import InboxState, Outgoing, ReplyState, ReplyTarget


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
    # who stopped the run and how, as people read it ("Ada (Stop button)", "Ada (/stop)");
    # None when nobody did (a failure, the gateway's shutdown, or recorded before it was kept)
    stopped_by: str | None = None


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
    # a person's files (their message's Attachment dicts; ``local_path`` once saved)
    attachments: list[dict[str, Any]] = field(default_factory=list)
