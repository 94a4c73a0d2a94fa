"""The engine's in-memory state per run and per conversation, and the names it derives.

An :class:`ActiveRun` lives from a run's start to its recorded end; a
:class:`ConversationSlot` while its conversation has work. Nothing here is the truth about a
message: that is the store's; this is what one process needs to drive the runs it has.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from provisioning import naming
from provisioning.rlimits import RunLimits

from ..model import ReplyTarget
from ..runner import RunHandle
from ..store import MessageRecord, PromptRecord
from . import prompts as P
from .message_queue import AlbumKey, MessageQueue
from .progress import ProgressState
from .reporter import ProgressReporter
from .scheduler import Lease

log = logging.getLogger(__name__)


DAY_S = 24 * 3600  # the window of the new-conversation limits


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


# how a person stopped a run, recorded with it (RunOutcome.stopped_by: "Ada (Stop button)")
STOP_COMMAND = "/stop"
STOP_BUTTON = "Stop button"

ABORT_WAIT_S = 2.0  # after the grace: how long cancelled tasks get to end, the backend to close


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
    stopped_via: str = STOP_COMMAND  # how: STOP_COMMAND or STOP_BUTTON
    shutdown: bool = False
    summary_shown: bool = False  # its bubble was turned into the summary (not "working")
    reporter: ProgressReporter | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    lease: Lease | None = None  # its run slot (parked while a prompt waits for its person)
    limits: RunLimits = field(default_factory=RunLimits)  # what it started under

    def stopped_text(self) -> str | None:
        """Who stopped it and how, as the operators' views show it ("Ada (Stop button)");
        None when no person did."""
        return None if self.stopped_by is None else f"{self.stopped_by} ({self.stopped_via})"


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


def run_person(msg: MessageRecord) -> str:
    """Whom a run counts against for ``limits.max_runs_per_user``: its sender, by the
    platform's own id (qualified by the platform: ids of two platforms are not one person).
    Its team is :func:`bridge.model.thread_group` of its thread key."""
    return f"{msg.platform}:{msg.sender_id}"


def remember(kept: OrderedDict[Any, Any], key: Any, value: Any, limit: int = HOMES_KEPT) -> None:
    """Note ``key`` as the most recent in ``kept``; the least recent go past ``limit``."""
    kept[key] = value
    kept.move_to_end(key)
    while len(kept) > limit:
        kept.popitem(last=False)
