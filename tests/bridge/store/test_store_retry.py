"""StoreRetry waits out a store that cannot write now, and never retries what cannot work.

A write that failed because the disk is full or the database is locked may succeed later;
one that failed because its row is not there fails the same way forever, and a caller
retrying it would hold its lock (a conversation's delivery) for good.
"""

from __future__ import annotations

import pytest

from bridge.store import StoreError, StoreFull, StoreRetry, StoreUnavailable


async def test_a_store_that_cannot_write_now_is_waited_out() -> None:
    retry = StoreRetry(first_s=0.001, max_s=0.002)
    failures: list[StoreError] = [StoreFull("full"), StoreUnavailable("database is locked")]

    async def write() -> str:
        if failures:
            raise failures.pop(0)
        return "written"

    assert await retry.run(write, "a write") == "written"
    assert not failures


async def test_a_write_that_cannot_work_is_not_retried() -> None:
    retry = StoreRetry(first_s=0.001, max_s=0.002)
    calls = 0

    async def write() -> None:
        nonlocal calls
        calls += 1
        raise StoreError("store x: no reply 5")

    with pytest.raises(StoreError, match="no reply 5"):
        await retry.run(write, "a write")
    assert calls == 1


async def test_a_stopping_gateway_gives_up_at_the_next_failure() -> None:
    retry = StoreRetry(first_s=0.001, max_s=0.002)
    retry.stop()

    async def write() -> None:
        raise StoreFull("full")

    assert await retry.run(write, "a write") is None
