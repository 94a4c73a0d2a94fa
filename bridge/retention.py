"""Retention: the gateway prunes its own old records and, if asked, archives idle homes.

The runtime-data rules applied to the gateway's own data: inbox, run and reply records
older than ``retention.records_days`` are deleted by a periodic sweep (never a reply not
yet delivered or a message not yet answered: the store's ``prune`` keeps those), and with
``retention.archive_idle_days`` set, homes idle that long are packed into ``archive/``
(restored by the next message). The sweep is one tracked task, started with the gateway
and awaited when it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from provisioning.errors import ProvisioningError
from provisioning.layout import RootInfo

from .config import RetentionSettings
from .operators import Operators
from .store import Store, StoreError, utc_midnight

log = logging.getLogger(__name__)

DAY_S = 86400.0


class Sweeper:
    """Runs :meth:`sweep` at start and every ``sweep_every_s`` until :meth:`stop`."""

    def __init__(
        self,
        settings: RetentionSettings,
        store: Store,
        operators: Operators | None = None,
        root: RootInfo | None = None,
        *,
        keeps_today: bool = False,
    ) -> None:
        """``keeps_today``: a daily spend cap is set; it sums today's runs (UTC), so the
        sweep keeps them whatever ``records_days`` says (a sweep within the day would lift a
        reached cap hours before midnight)."""
        self.settings = settings
        self.keeps_today = keeps_today
        self.store = store
        self.operators = operators
        self.root = root
        self.sweeps = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def sweep(self, now: float | None = None) -> dict[str, Any]:
        """One pass: prune old records, then archive idle homes when configured."""
        now = time.time() if now is None else now
        before = now - self.settings.records_days * DAY_S
        if self.keeps_today:
            before = min(before, utc_midnight())
        pruned = await self.store.prune(before)
        if any(pruned.values()):
            log.info(
                "retention: pruned records older than %g days: %s",
                self.settings.records_days,
                ", ".join(f"{n} {table}" for table, n in pruned.items()),
            )
        report: dict[str, Any] = {"pruned": pruned, "archived": []}
        idle_days = self.settings.archive_idle_days
        if idle_days is not None and self.operators is not None and self.root is not None:
            rows = await self.operators.archive_idle(self.root, idle_days)
            report["archived"] = rows
            for row in rows:
                if row.get("failed"):  # not busy: something to look at (a full disk, say)
                    log.warning(
                        "retention: could not archive %s (home %s): %s",
                        row["threadKey"],
                        row["home"],
                        row["reason"],
                    )
                elif not row["archived"]:
                    log.info("retention: not archiving %s: %s", row["threadKey"], row["reason"])
        self.sweeps += 1
        return report

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="retention-sweep")

    async def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                await self.sweep()
            except (StoreError, ProvisioningError, OSError) as exc:
                log.error("retention sweep failed (will try again): %s", exc)
            except Exception:
                log.exception("retention sweep failed unexpectedly (will try again)")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=self.settings.sweep_every_s)

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop the loop; a sweep in progress gets ``grace_s`` to finish, then is cancelled."""
        self._stop.set()
        task, self._task = self._task, None
        if task is None:
            return
        done, _ = await asyncio.wait({task}, timeout=grace_s)
        if not done:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
