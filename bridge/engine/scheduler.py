"""Run slots shared fairly between people and teams.

Why: ``limits.max_concurrent_runs`` was a bare semaphore, taken first come first served.
One person's eight long runs (in eight threads) made an unrelated conversation wait 89 s;
with the defaults (a run may take 900 s, and a run waiting on an approval nobody answers
holds its slot up to ``limits.prompt_wait_s``, an hour) one person could keep every other
conversation of the gateway waiting for an hour.

So a run needs three things at once: a gateway slot (``max_concurrent_runs``), room under
its person's cap (``max_runs_per_user``) and under its team's (``max_runs_per_team``: a
Slack workspace, a Telegram chat, see :func:`bridge.model.thread_group`); each cap is at
most the gateway's, 0 means none. Waiters are served in arrival order, except that one
held back by its own person's or team's cap does not hold up those behind it (no
head-of-line blocking): when a slot frees, the first waiter that may run takes it.

A run waiting for a person (an approval, a question shown and not answered) is *parked*:
it stops counting against the gateway and its team while it waits, and counts again once
answered. It keeps counting against its own person's cap, so nobody can park many runs. A
resumed run counts again at once, even when that takes the gateway (or its team) over its
cap for a moment: the person's answer must reach the runner without waiting behind other
people's runs, and no new run starts until the count is back under the cap, so the excess
drains by itself (it is at most the number of runs that were parked).

Every wait is cancellable: a waiter cancelled (or whose notice failed) leaves the queue and
no count behind, even when a slot was given to it in the same instant. :meth:`close` ends
every wait at once (the gateway stopping): the waiters get None and start nothing.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum


class WaitReason(StrEnum):
    """Why a run waits; the most specific one applies (the person's, the team's, the
    gateway's): the one the person can do something about, or at least understand."""

    USER = "user"  # its person already has max_runs_per_user runs going
    TEAM = "team"  # its team or chat already has max_runs_per_team runs going
    GATEWAY = "gateway"  # the gateway runs max_concurrent_runs runs


@dataclass(frozen=True)
class Wait:
    """What a waiter is told: why it waits, how many runs count there, and the cap."""

    reason: WaitReason
    count: int
    limit: int


@dataclass(eq=False)
class Lease:
    """One run's slot, from :meth:`RunScheduler.acquire` until :meth:`RunScheduler.release`."""

    user: str
    team: str
    parked: bool = False  # waiting for a person: not counted against the gateway or team
    released: bool = False


@dataclass(eq=False)
class _Waiter:
    user: str
    team: str
    future: asyncio.Future[Lease | None] = field(repr=False)


def _cap(limit: int, total: int) -> int:
    return total if limit <= 0 else min(limit, total)


def _drop(counter: Counter[str], key: str) -> None:
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]  # the keys of people and teams that ran once are not kept


class RunScheduler:
    """The gateway's run slots (see the module's docstring)."""

    def __init__(self, total: int, per_user: int = 0, per_team: int = 0) -> None:
        if total < 1:
            raise ValueError("the gateway needs at least one run slot")
        self.total = total
        self.per_user = _cap(per_user, total)
        self.per_team = _cap(per_team, total)
        self._waiters: list[_Waiter] = []  # in arrival order
        self._users: Counter[str] = Counter()  # leases held per person, parked ones included
        self._teams: Counter[str] = Counter()  # leases counted per team (not parked)
        self.running = 0  # leases counted against the gateway's cap (not parked)
        self.held = 0  # every lease not released (parked ones included)
        self.closed = False

    # -- what it holds (for /status, the notices and the tests) ----------------------------

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @property
    def parked(self) -> int:
        return self.held - self.running

    def user_runs(self, user: str) -> int:
        return self._users.get(user, 0)

    def team_runs(self, team: str) -> int:
        return self._teams.get(team, 0)

    def blocked(self, user: str, team: str) -> Wait | None:
        """Why a run of ``user`` in ``team`` could not start now, or None.

        A person's (or team's) cap is named when it holds the run back by itself: when it
        is below the gateway's, or the gateway has room (the person's own parked runs fill
        their cap). A cap as large as the gateway's binds only with the gateway full, and
        then the gateway's limit is what the person is told."""
        users, teams = self._users[user], self._teams[team]
        full = self.running >= self.total
        if users >= self.per_user and (self.per_user < self.total or not full):
            return Wait(WaitReason.USER, users, self.per_user)
        if teams >= self.per_team and (self.per_team < self.total or not full):
            return Wait(WaitReason.TEAM, teams, self.per_team)
        if full:
            return Wait(WaitReason.GATEWAY, self.running, self.total)
        return None

    # -- taking and giving back -------------------------------------------------------------

    async def acquire(
        self,
        user: str,
        team: str,
        notify: Callable[[Wait], Awaitable[None]] | None = None,
    ) -> Lease | None:
        """A slot for one run of ``user`` in ``team``; None when the scheduler closed first.

        Queued at once (its place in line is kept while ``notify`` runs): when it cannot
        start at once, ``notify`` is awaited with why, then the slot is waited for. A
        cancellation (or ``notify`` raising) takes the waiter out of line and gives back a
        slot given to it meanwhile.
        """
        if self.closed:
            return None
        waiter = _Waiter(user, team, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        self._dispatch()
        try:
            if not waiter.future.done() and notify is not None:
                why = self.blocked(user, team)
                if why is not None:
                    await notify(why)
            return await waiter.future
        except BaseException:
            self._abandon(waiter)
            raise

    def release(self, lease: Lease) -> None:
        """Give a run's slot back (once; again is a no-op), and serve who waits for it."""
        if lease.released:
            return
        lease.released = True
        self.held -= 1
        _drop(self._users, lease.user)
        if not lease.parked:
            self.running -= 1
            _drop(self._teams, lease.team)
        self._dispatch()

    def park(self, lease: Lease) -> None:
        """The run waits for a person: its gateway and team slots go to who waits for one."""
        if lease.parked or lease.released:
            return
        lease.parked = True
        self.running -= 1
        _drop(self._teams, lease.team)
        self._dispatch()

    def resume(self, lease: Lease) -> None:
        """The person answered: the run counts again, at once (over the caps if need be)."""
        if not lease.parked or lease.released:
            return
        lease.parked = False
        self.running += 1
        self._teams[lease.team] += 1

    def close(self) -> None:
        """No run starts any more (the gateway is stopping): every waiter gets None now,
        and so does every later :meth:`acquire`. Leases held stay until released."""
        self.closed = True
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.future.done():
                waiter.future.set_result(None)

    # -- inside -----------------------------------------------------------------------------

    def _grant(self, user: str, team: str) -> Lease:
        self.held += 1
        self.running += 1
        self._users[user] += 1
        self._teams[team] += 1
        return Lease(user, team)

    def _dispatch(self) -> None:
        """Give free slots to the waiters in arrival order, passing over those whose person
        or team is at its cap (they keep their place for when theirs frees)."""
        if self.closed:
            return
        for waiter in list(self._waiters):
            if self.running >= self.total:
                return
            if waiter.future.done():  # cancelled: its task takes it out, or did already
                continue
            if self.blocked(waiter.user, waiter.team) is not None:
                continue
            self._waiters.remove(waiter)
            waiter.future.set_result(self._grant(waiter.user, waiter.team))

    def _abandon(self, waiter: _Waiter) -> None:
        """A waiter that stopped waiting: out of line, and its slot (if one was given to it
        just before) back to the next."""
        if waiter in self._waiters:
            self._waiters.remove(waiter)
        future = waiter.future
        if not future.done():
            future.cancel()
        elif not future.cancelled():
            lease = future.result()
            if lease is not None:
                self.release(lease)
                return  # release served the others
        self._dispatch()
