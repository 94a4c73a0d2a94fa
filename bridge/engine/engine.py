"""The engine itself: built from its layers, started, stopped.

``Engine`` is the core's :class:`~bridge.ports.Gateway`. Its job is split by layer (see
:mod:`bridge.engine`); this top one makes the parts and state every layer shares, and ends
it all: ``stop`` ends intake and stops the runs in flight (telling their conversations),
``abort`` cancels what is left once the gateway's grace has run out.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from provisioning.homes import Home, Homes

from ..config import CoreSettings
from ..metrics import Metrics
from ..ports import Surface
from ..runner import RunnerBackend
from ..store import Store, StoreRetry
from . import run_limits
from .delivery import Deliverer
from .recovery import Recovery
from .scheduler import RunScheduler
from .state import ABORT_WAIT_S, ActiveRun, ConversationSlot

log = logging.getLogger(__name__)


class Engine(Recovery):
    """The core's :class:`~bridge.ports.Gateway`: one run at a time per conversation,
    commands at once, nothing lost.

    Its methods live in the layers it is built of (:mod:`bridge.engine`), so this class,
    like each layer, stays readable on its own."""

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
        # back by a run while it waits for its person's answer: see bridge/engine/scheduler.py
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
        await self.deliverer.settle()  # the replies sent are marked so before the store closes
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
        await self.deliverer.abandon(ABORT_WAIT_S)  # replies' sent marks, briefly
        await self._kill_cut_off_runs()
        try:
            await asyncio.wait_for(self.backend.close(), ABORT_WAIT_S)
        except Exception as exc:  # closing is best effort here: the process is ending
            log.error("the runner backend did not close: %r", exc)
