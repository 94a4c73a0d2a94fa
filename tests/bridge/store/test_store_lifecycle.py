"""The store contract, open and close: what returned is there at the next open, a close lets
the calls already made finish (and durably), and a store not open refuses every call."""

from __future__ import annotations

import asyncio

import pytest
from store_support import Backend, inbound

from bridge.store import StoreError


async def test_persists_across_close_and_open(backend: Backend) -> None:
    s = backend.make()
    await s.open()
    rec, _ = await s.accept(inbound("ev1"), home="h", is_command=False)
    await s.set_kv("k", "v")
    await s.close()
    with pytest.raises(StoreError):
        await s.get_kv("k")

    s2 = backend.make()
    await s2.open()
    try:
        assert await s2.get_message(rec.id) == rec
        assert await s2.get_kv("k") == "v"
        again, new = await s2.accept(inbound("ev1"), home="h", is_command=False)
        assert not new and again.id == rec.id
    finally:
        await s2.close()


async def test_close_lets_calls_already_made_finish(backend: Backend) -> None:
    s = backend.make()
    await s.open()
    # Tasks start in creation order: the accepts reach the worker before the close does.
    accepts = [
        asyncio.create_task(s.accept(inbound(f"ev{i}"), home="h", is_command=False))
        for i in range(5)
    ]
    closing = asyncio.create_task(s.close())
    results = await asyncio.gather(*accepts)
    await closing
    assert all(new for _, new in results)
    assert backend.count("inbox") == 5  # on disk: another connection sees them


async def test_not_open_is_an_error(backend: Backend) -> None:
    with pytest.raises(StoreError):
        await backend.make().get_kv("k")
