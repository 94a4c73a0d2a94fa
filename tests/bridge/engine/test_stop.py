"""``/stop`` and the gateway's own stop: a run stopped with everything it started, by its
asker or an operator (others are refused), before it began (waiting for a run slot), and a
gateway stopping starts nothing new and leaves nothing of the engine running.

The real gateway in process with the fake runner, or the bundled reference runner whose
``!ignore-term`` run outlives SIGTERM until the runner's kill grace ends it; every wait is
bounded.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sqlite3
from pathlib import Path

import plain_surface
import pytest
from gateway_harness import run_starts as starts
from gateway_harness import running_gateway, use_reference_runner, wait_until

from bridge.model import Inbound, InboxState
from bridge.store import SqliteStore

KEY = "plain:room"


def inbound(event_id: str, text: str, *, thread: str = KEY, user: str = "u1") -> Inbound:
    return Inbound(
        platform="plain", event_id=event_id, thread_key=thread, sender_id=user, text=text
    )


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_stop_kills_the_run_and_everything_it_started(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("s", "spawn")
        await wait_until(
            lambda: any(r["event"] == "spawned" for r in client.runs()), what="children spawned"
        )
        pids = next(r["pids"] for r in client.runs() if r["event"] == "spawned")
        runner_pid = client.starts("web:s")[0]["pid"]
        assert all(_alive(p) for p in pids)
        await client.post("s", "/stop", user="mallory")
        refused = await client.wait_role("s", "status")
        assert any("Only ada" in m["text"] for m in refused)
        await client.post("s", "/stop")
        errors = await client.wait_role("s", "error")
        assert "Stopped by ada" in errors[0]["text"]
        await wait_until(
            lambda: not any(_alive(p) for p in [*pids, runner_pid]),
            10,
            "the run's processes to be gone",
        )


async def test_an_operator_may_stop_someone_elses_run(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_WEB__OPERATORS"] = '["oscar"]'
    async with running_gateway(env) as (_, client):
        await client.post("op", "hold OP1")
        await wait_until(lambda: len(client.starts("web:op")) == 1, what="OP1 started")
        await client.post("op", "/stop", user="oscar")
        errors = await client.wait_role("op", "error")
        assert "Stopped by oscar" in errors[0]["text"]
    assert _stopped_by(env) == ["oscar (/stop)"]  # who and how, kept with the run


def _stopped_by(env: dict[str, str]) -> list[str | None]:
    """runs.stopped_by of every run, oldest first (what the operators' views show)."""
    with contextlib.closing(
        sqlite3.connect(Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db")
    ) as conn:
        return [row[0] for row in conn.execute("SELECT stopped_by FROM runs ORDER BY id")]


async def test_stop_sent_while_the_run_waits_for_a_slot_stops_it_as_it_starts(
    env: dict[str, str], fake_dir: Path
) -> None:
    """A message waits for the gateway's only run slot (it has left its queue, its run has
    not begun): a /stop then stops that run as it starts, instead of "Nothing is running"
    and the run going ahead. Its runner is not started at all: started and then stopped, a
    fast runner could answer first (under load it did)."""
    env["JAZZ_BRIDGE_ISOLATION"] = "off"  # one account for every conversation
    env["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "1"
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None
        await gw.submit(inbound("a1", "hold one", thread="plain:a"))
        await wait_until(lambda: len(starts(fake_dir)) == 1, 20, "the first run to start")
        await gw.submit(inbound("b1", "message b1", thread="plain:b"))
        await wait_until(
            lambda: any("limit; yours starts" in t for t in surface.texts()), 20, "b1 waiting"
        )
        await gw.submit(inbound("b2", "/stop", thread="plain:b"))
        await wait_until(
            lambda: any(t.startswith("⏹️ Stopped: the run that was about") for t in surface.texts()),
            20,
            "the /stop answered",
        )
        (fake_dir / "release-one").touch()
        await wait_until(
            lambda: any(t.startswith("⏹️ Stopped by u1") for t in surface.texts()),
            20,
            "b1's run stopped as it started",
        )
        assert not any(t.startswith("fake answer to: message b1") for t in surface.texts())
        assert len(starts(fake_dir)) == 1  # b1's runner never started: nothing to race
    assert _stopped_by(env) == [None, "u1 (/stop)"]  # b1 stopped as it started, by /stop


async def test_a_message_waiting_for_a_run_slot_does_not_start_while_the_gateway_stops(
    env: dict[str, str],
) -> None:
    env["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "1"
    async with running_gateway(env) as (app, client):
        await client.post("a", "hold A")
        await wait_until(lambda: len(client.starts("web:a")) == 1, what="A's run")
        await client.post("b", "hold B")
        await client.wait_role("b", "status")  # told it waits for the gateway's limit
        await app.stop()  # SIGTERM's path: A is stopped, which frees the slot B waits for
        assert client.starts("web:b") == [], "a new run started while the gateway stopped"
    client.release("B")
    async with running_gateway(env) as (_, client):  # B was kept: the next start runs it
        answer = (await client.wait_role("b", "assistant"))[0]["text"]
        assert "hold B" in answer
        assert len(client.starts("web:b")) == 1


# -- a stop that runs past server.shutdown_grace_s -------------------------------------------


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


async def test_a_stop_cut_short_by_the_grace_leaves_no_task_behind(
    env: dict[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture, fake_dir: Path
) -> None:
    """The run ignores SIGTERM and the runner waits 5 s before SIGKILL; the gateway allows
    its engine 1 s to stop. When the stop returns, every conversation worker and engine
    task is over (they were left running while the store closed under them, each then
    failing on a closed store), and the message is left running for the next start to
    answer "interrupted"."""
    env["JAZZ_BRIDGE_ISOLATION"] = "off"  # one account for every conversation
    use_reference_runner(env, fake_dir)
    env["JAZZ_BRIDGE_SERVER__SHUTDOWN_GRACE_S"] = "1"
    env["JAZZ_BRIDGE_RUNNER__KILL_GRACE_S"] = "5"
    caplog.set_level(logging.WARNING)
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        engine = app.engine
        assert engine is not None
        sent = await engine.submit(
            Inbound(
                platform="plain",
                event_id="e1",
                thread_key="plain:slow-to-stop",
                sender_id="u1",
                text="!ignore-term",
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
