"""The run slots shared between people and teams (bridge/engine/scheduler.py), on their own: the
gateway's cap, the person's and the team's, no head-of-line blocking, parked runs, and
waits that are cancelled or ended by close. The gateway's use of them is proved end to end
in tests/faults/test_run_slot_fairness.py."""

from __future__ import annotations

import asyncio

import pytest

from bridge.engine.scheduler import Lease, RunScheduler, Wait, WaitReason

BOUND_S = 5.0


async def granted(task: asyncio.Task[Lease | None]) -> Lease:
    lease = await asyncio.wait_for(task, BOUND_S)
    assert lease is not None
    return lease


async def settle() -> None:
    """Let every task that can run do so (the scheduler hands out slots synchronously)."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_person_over_their_cap_waits_and_is_told_why() -> None:
    runs = RunScheduler(total=4, per_user=2, per_team=0)
    first = await runs.acquire("ada", "T1")
    second = await runs.acquire("ada", "T1")
    told: list[Wait] = []

    async def tell(why: Wait) -> None:
        told.append(why)

    third = asyncio.create_task(runs.acquire("ada", "T1", tell))
    await settle()
    assert not third.done()
    assert told == [Wait(WaitReason.USER, 2, 2)]
    assert first is not None and second is not None
    runs.release(first)
    assert (await granted(third)).user == "ada"
    assert runs.user_runs("ada") == 2


async def test_a_waiter_held_back_by_its_own_cap_does_not_hold_up_the_next() -> None:
    runs = RunScheduler(total=3, per_user=1)
    await runs.acquire("ada", "T1")
    blocked = asyncio.create_task(runs.acquire("ada", "T1"))
    await settle()
    other = asyncio.create_task(runs.acquire("bob", "T2"))
    await granted(other)
    assert not blocked.done()
    assert runs.waiting == 1
    blocked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await blocked
    assert runs.waiting == 0


async def test_a_team_at_its_cap_waits_while_another_team_runs() -> None:
    runs = RunScheduler(total=4, per_user=0, per_team=2)
    await runs.acquire("ada", "T1")
    await runs.acquire("bob", "T1")
    assert runs.blocked("cyd", "T1") == Wait(WaitReason.TEAM, 2, 2)
    assert runs.blocked("dan", "T2") is None
    await granted(asyncio.create_task(runs.acquire("dan", "T2")))


async def test_the_gateway_cap_is_named_when_it_is_what_binds() -> None:
    runs = RunScheduler(total=2, per_user=5, per_team=5)  # caps above the gateway's: its own
    assert (runs.per_user, runs.per_team) == (2, 2)
    await runs.acquire("ada", "T1")
    await runs.acquire("bob", "T2")
    assert runs.blocked("cyd", "T3") == Wait(WaitReason.GATEWAY, 2, 2)
    # ada's cap equals the gateway's: the gateway being full is what she is told
    assert runs.blocked("ada", "T1") == Wait(WaitReason.GATEWAY, 2, 2)


async def test_a_parked_run_gives_its_gateway_slot_but_not_its_persons() -> None:
    runs = RunScheduler(total=1, per_user=1)
    lease = await runs.acquire("ada", "T1")
    assert lease is not None
    bob = asyncio.create_task(runs.acquire("bob", "T2"))
    ada_again = asyncio.create_task(runs.acquire("ada", "T1"))
    await settle()
    assert not bob.done()
    runs.park(lease)  # ada's run waits for her answer
    bobs = await granted(bob)
    assert (runs.held, runs.running, runs.parked) == (2, 1, 1)
    await settle()
    assert not ada_again.done()  # her parked run still counts for her
    runs.resume(lease)  # she answered: over the gateway's cap for a moment
    assert runs.running == 2
    runs.release(bobs)
    await settle()
    assert not ada_again.done()  # no new run until the count is back under the cap
    runs.release(lease)
    await granted(ada_again)


async def test_a_lease_given_to_a_cancelled_waiter_goes_to_the_next() -> None:
    runs = RunScheduler(total=1)
    lease = await runs.acquire("ada", "T1")
    assert lease is not None
    gone = asyncio.create_task(runs.acquire("bob", "T2"))
    after = asyncio.create_task(runs.acquire("cyd", "T3"))
    await settle()
    runs.release(lease)  # bob's future holds the slot now, his task has not run yet
    gone.cancel()
    await granted(after)
    assert runs.held == 1


async def test_a_notice_that_fails_leaves_no_waiter_or_count_behind() -> None:
    runs = RunScheduler(total=1)
    await runs.acquire("ada", "T1")

    async def broken(why: Wait) -> None:
        raise OSError("store gone")

    with pytest.raises(OSError):
        await runs.acquire("bob", "T2", broken)
    assert (runs.waiting, runs.held) == (0, 1)


async def test_close_ends_every_wait_and_refuses_new_ones() -> None:
    runs = RunScheduler(total=1)
    lease = await runs.acquire("ada", "T1")
    waiting = asyncio.create_task(runs.acquire("bob", "T2"))
    await settle()
    runs.close()
    assert await asyncio.wait_for(waiting, BOUND_S) is None
    assert await runs.acquire("cyd", "T3") is None
    assert lease is not None
    runs.release(lease)
    runs.release(lease)  # again: a no-op
    assert runs.held == 0


def test_a_gateway_without_run_slots_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one run slot"):
        RunScheduler(total=0)
