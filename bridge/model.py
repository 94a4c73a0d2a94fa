"""The platform-neutral message model every adapter converts to and from.

Adapters turn a platform's event into an :class:`Inbound`; the core answers with
:class:`Outgoing` messages addressed by a :class:`ReplyTarget` (the adapter's own opaque
context: channel and thread, chat and topic). Nothing here knows a platform SDK.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class InboxState(StrEnum):
    ACCEPTED = "accepted"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    # one part of a message the platform delivered in parts (a Telegram album): its run and
    # its answer are those of the first part, whose run it joined
    MERGED = "merged"


class ReplyState(StrEnum):
    PENDING = "pending"
    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"


class ReplyKind(StrEnum):
    ANSWER = "answer"  # the agent's answer (notifies)
    NOTICE = "notice"  # a command's answer, queue position, "interrupted, send again"
    ERROR = "error"  # a failed run, said plainly
    PROMPT = "prompt"  # an approval or a question, with choices
    ARTIFACT = "artifact"  # a file from the run's envelope, uploaded from inside the home


@dataclass(frozen=True)
class Attachment:
    """A file that came with a message; ``local_path`` once downloaded into the home."""

    name: str
    url: str | None = None
    size: int | None = None
    media_type: str | None = None
    platform_id: str | None = None
    local_path: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attachment:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})  # type: ignore[arg-type]


@dataclass(frozen=True)
class Inbound:
    """One message from a person, normalized. ``event_id`` is the platform's dedupe key."""

    platform: str
    event_id: str
    thread_key: str
    sender_id: str
    text: str
    sender_name: str | None = None
    attachments: tuple[Attachment, ...] = ()
    shared_chat: bool = False  # a group or channel: secrets are never collected here
    is_operator: bool = False
    target: dict[str, Any] = field(default_factory=dict)  # the adapter's reply context
    received_at: float = field(default_factory=time.time)
    # the platform's id of a message it delivers in parts, one event each (a Telegram
    # album's media_group_id): the parts of one sender run as one turn (None: whole)
    part_of: str | None = None


@dataclass(frozen=True)
class Choice:
    """A button (or numbered choice). ``token`` is opaque to the platform and the person."""

    token: str
    label: str
    style: str = "default"  # default | primary | danger


@dataclass(frozen=True)
class Outgoing:
    """A message the core wants shown. ``text`` is standard Markdown."""

    kind: ReplyKind
    text: str
    choices: tuple[Choice, ...] = ()
    file_path: str | None = None  # ARTIFACT: a path inside the conversation's home
    media_type: str | None = None
    requester: str | None = None  # who may press the choices
    # a later part of one answer the core split in several: a surface that quotes the
    # question (a Telegram group) does so above the first part only
    continues: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "text": self.text,
            "choices": [c.__dict__ for c in self.choices],
            "file_path": self.file_path,
            "media_type": self.media_type,
            "requester": self.requester,
            "continues": self.continues,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outgoing:
        return cls(
            kind=ReplyKind(data["kind"]),
            text=str(data.get("text", "")),
            choices=tuple(Choice(**c) for c in data.get("choices", [])),
            file_path=data.get("file_path"),
            media_type=data.get("media_type"),
            requester=data.get("requester"),
            continues=bool(data.get("continues", False)),
        )


@dataclass(frozen=True)
class ReplyTarget:
    """Where replies for one conversation go: the surface and its own context."""

    surface: str
    thread_key: str
    context: dict[str, Any] = field(default_factory=dict)


def thread_group(thread_key: str) -> str:
    """The team or chat a thread belongs to: its key's first two ``:`` parts (a Slack
    workspace ``slack:T0123``, a Telegram chat ``telegram:-100…``; a web thread is its own).
    Every adapter's keys are ``platform:<team or chat>[:...]``."""
    return ":".join(thread_key.split(":", 2)[:2])
