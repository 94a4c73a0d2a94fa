"""What every layer of the engine stands on: its parts, its state, its tasks.

The engine is one object (:class:`~bridge.engine.engine.Engine`, the core's
:class:`~bridge.ports.Gateway`) built in layers, one module per job, each layer a class on
top of the one below it (see :mod:`bridge.engine`). This bottom layer declares what the
layers share (made by ``Engine.__init__``) and the small lookups all of them use: a
conversation's slot and home, how a platform shows choices, spawning a tracked task.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections import OrderedDict
from pathlib import Path
from typing import Any

from provisioning.homes import Home, Homes
from provisioning.rlimits import RunLimits

from ..config import CoreSettings
from ..metrics import Metrics
from ..ports import Surface
from ..runner import RunnerBackend
from ..store import MessageRecord, Store, StoreRetry
from .delivery import Deliverer
from .prompts import DEFAULT_ROOM
from .scheduler import RunScheduler
from .state import STOP_COMMAND, ActiveRun, ConversationSlot, remember

log = logging.getLogger(__name__)


class EngineCore:
    """What every layer of the engine shares: its parts and state (made by
    :meth:`Engine.__init__ <bridge.engine.engine.Engine.__init__>`), its task set, and the
    small lookups each layer needs (a conversation's slot and home, how a platform shows
    choices)."""

    settings: CoreSettings
    store: Store
    homes: Homes
    backend: RunnerBackend
    metrics: Metrics
    surfaces: dict[str, Surface]
    deliverer: Deliverer
    stopping: bool
    started: bool
    # one retry for every write an acknowledged message is owed (a full disk is waited out)
    _retry: StoreRetry
    _slots: dict[int, ConversationSlot]
    _homes: OrderedDict[int, Home]
    _home_names: OrderedDict[int, str]
    _closed_albums: OrderedDict[tuple[int, str, str], int]
    _runs: RunScheduler
    _run_limits: RunLimits
    _tasks: set[asyncio.Task[Any]]
    _stop_tokens: dict[str, ActiveRun]
    _closed_bubbles: OrderedDict[str, None]
    _leftovers_killed: asyncio.Event
    _tag_secret: bytes

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

    def _home_path(self, conversation_id: int) -> Path | None:
        home = self._homes.get(conversation_id)
        if home is not None:
            return home.path
        name = self._home_names.get(conversation_id)
        return self.homes.root.layout.home(name) if name else None

    def _numbered_on(self, platform: str) -> bool:
        surface = self.surfaces.get(platform)
        return not (surface and surface.capabilities.buttons)

    def _prompt_room(self, platform: str) -> int:
        """How long a prompt's message, settled line included, may be on ``platform``: its
        surface's max_length (:mod:`bridge.engine.prompts` counts it in UTF-16 units)."""
        surface = self.surfaces.get(platform)
        return surface.capabilities.max_length if surface else DEFAULT_ROOM

    def _numbered(self, run: ActiveRun) -> bool:
        """Whether the run's prompts were shown with numbered choices (no buttons): only
        then is a typed number a choice. With buttons, "3" typed to a question is the answer
        3 (not its third button), and typing never approves a tool."""
        return self._numbered_on(run.message.platform)

    async def count_accounts(self) -> None:
        """``/metrics``' share of the uid range live conversation accounts hold (isolated);
        counted again at each scrape, since ``homes archive`` may give accounts back from
        another process."""
        registry = self.homes.registry
        if self.homes.isolated and registry is not None:
            used, capacity = await asyncio.to_thread(registry.usage)
            self.metrics.accounts_used.set(used)
            self.metrics.accounts_capacity.set(capacity)

    async def _ensure_home(self, msg: MessageRecord) -> Home:
        # Once per conversation per process, again when the home was archived since (the
        # run is recorded as started by now, so it cannot be archived under us after this).
        home = self._homes.get(msg.conversation_id)
        present = None if home is None else self.homes.present_now(home)
        if home is not None and present is None:  # being archived or restored: wait for it
            present = await asyncio.to_thread(self.homes.present, home)
        if home is None or not present:
            home = await asyncio.to_thread(self.homes.ensure, msg.thread_key)
            await self.count_accounts()
        remember(self._homes, msg.conversation_id, home)
        return home

    async def _settle_all(self) -> None:
        """Wait (bounded) until no finished run has processes left (runs sweep after wait)."""
        last = [s.last for s in self._slots.values() if s.last is not None]
        if last:
            settling = [asyncio.ensure_future(h.settled()) for h in last]
            _done, pending = await asyncio.wait(settling, timeout=5)
            for task in pending:
                task.cancel()
            await asyncio.gather(*settling, return_exceptions=True)

    async def _stop_run(self, run: ActiveRun, by: str, via: str = STOP_COMMAND) -> None:
        run.stopped_by, run.stopped_via = by, via
        if run.handle is not None:
            await run.handle.stop("stopped")
