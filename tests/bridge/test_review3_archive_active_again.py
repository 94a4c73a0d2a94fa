"""Review: the idle sweep archives only homes still idle when their turn comes.

The sweep lists the idle conversations once, then archives them one after another; packing
a big home takes minutes. A conversation listed as idle that someone writes to meanwhile
(its message run and answered before the sweep reaches it) is not idle any more: archiving
it anyway packs away a home in use, and the person's next message waits for a restore.

Here the sweep waits on the first home's lock (held as a long archive or a restore of it
would) while the second conversation gets a message and its answer.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway, wait_until

from bridge.operators import Operators
from provisioning import naming
from provisioning.archive import LOCKS_DIR, home_lock, is_archived

LOCK_WAIT_S = 20.0


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def _someone_waits_for(lock_file: Path) -> bool:
    """A process is blocked on ``lock_file``'s flock (Linux lists waiters with ``->``)."""
    inode = os.stat(lock_file).st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields and fields[-3].endswith(f":{inode}"):
            return True
    return False


async def test_a_conversation_written_to_during_the_sweep_is_not_archived(
    env: dict[str, str],
) -> None:
    async with running_gateway(env) as (app, client):
        for thread in ("first", "later"):  # "first" is the older: the sweep starts there
            await client.post(thread, "hello")
            await client.wait_role(thread, "assistant")
        assert app.store is not None and app.provisioned is not None
        root, store = app.provisioned.root, app.store
        first, later = (naming.home_name(f"web:{t}") for t in ("first", "later"))
        ops = Operators(store, root.layout, app.provisioned.isolated)

        held, release = threading.Event(), threading.Event()

        def hold_first_home() -> None:
            with home_lock(root, first, exclusive=True):
                held.set()
                release.wait(LOCK_WAIT_S)

        holder = asyncio.create_task(asyncio.to_thread(hold_first_home))
        try:
            await wait_until(held.is_set, what="the first home's lock held")
            sweep = asyncio.create_task(ops.archive_idle(root, 1e-9))  # both idle now
            lock_file = root.layout.state / LOCKS_DIR / first
            await wait_until(lambda: _someone_waits_for(lock_file), what="the sweep waiting")

            await client.post("later", "back again")  # listed idle, now in use
            await client.wait_role("later", "assistant", count=2)

            async def delivered() -> bool:
                return not await store.undelivered_replies()

            await wait_until(delivered, what="the answer delivered")
        finally:
            release.set()
            await holder
        rows = {row["home"]: row for row in await asyncio.wait_for(sweep, LOCK_WAIT_S)}

        assert rows[first]["archived"] is True
        assert rows[later]["archived"] is False, rows[later]
        assert "active" in rows[later]["reason"], rows[later]
        assert root.layout.home(later).is_dir() and not is_archived(root.layout, later)
