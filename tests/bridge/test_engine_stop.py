"""A stop that runs past ``server.shutdown_grace_s``: nothing of the engine is left running
behind the store's close.

The real gateway (in process) with the bundled reference runner, whose ``!ignore-term``
run outlives SIGTERM until the runner's kill grace ends it; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Iterator
from pathlib import Path

import plain_surface
import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway, use_reference_runner, wait_until

from bridge.model import Inbound, InboxState
from bridge.store import SqliteStore

KEY = "plain:slow-to-stop"


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc's children lists)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        with contextlib.suppress(OSError):
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
    return found


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _ignores_term(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(ln for ln in status.splitlines() if ln.startswith("SigIgn:"))
    return bool(int(mask.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    e["JAZZ_BRIDGE_ISOLATION"] = "off"
    use_reference_runner(e, fake_dir)
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_a_stop_cut_short_by_the_grace_leaves_no_task_behind(
    env: dict[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The run ignores SIGTERM and the runner waits 5 s before SIGKILL; the gateway allows
    its engine 1 s to stop. When the stop returns, every conversation worker and engine
    task is over (they were left running while the store closed under them, each then
    failing on a closed store), and the message is left running for the next start to
    answer "interrupted"."""
    env["JAZZ_BRIDGE_SERVER__SHUTDOWN_GRACE_S"] = "1"
    env["JAZZ_BRIDGE_RUNNER__KILL_GRACE_S"] = "5"
    caplog.set_level(logging.WARNING)
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        engine = app.engine
        assert engine is not None
        sent = await engine.submit(
            Inbound(
                platform="plain", event_id="e1", thread_key=KEY, sender_id="u1", text="!ignore-term"
            )
        )
        assert sent.message_id is not None

        def ignoring_term() -> bool:
            """A process of the run (the runner, under the gateway's reaper) has SIGTERM
            ignored: its SigIgn mask says so."""
            for s in engine._slots.values():
                proc = getattr(s.active.handle, "proc", None) if s.active else None
                if proc is not None and any(_ignores_term(p) for p in _tree(proc.pid)):
                    return True
            return False

        await wait_until(ignoring_term, 20, "the run ignoring SIGTERM")
        pids = [
            p
            for s in engine._slots.values()
            if s.active is not None and s.active.handle is not None
            for p in _tree(s.active.handle.proc.pid)  # type: ignore[attr-defined]
        ]
        workers = [s.worker for s in engine._slots.values() if s.worker is not None]
        tasks = list(engine._tasks)
    assert workers and all(w.done() for w in workers), workers
    assert all(t.done() for t in tasks), [t for t in tasks if not t.done()]
    assert not [r for r in caplog.records if "is not open" in r.getMessage()]

    def gone() -> bool:
        return not any(Path(f"/proc/{p}").exists() and not _zombie(p) for p in pids)

    await wait_until(gone, 10, "the run's processes gone")
    store = SqliteStore(tmp_path / "root" / "state" / "bridge.db")
    await store.open()
    try:
        msg = await store.get_message(sent.message_id)
    finally:
        await store.close()
    assert msg is not None and msg.state is InboxState.RUNNING  # the next start says so
