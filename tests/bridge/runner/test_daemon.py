"""The daemon backend (``bridge.runner.daemon``) against a fake ``jazz daemon``: starting
a run (its token, a daemon that is not there or fails), closing, and waiting until a run
ended here has ended on the daemon before the conversation's next run.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from aiohttp import web
from daemon_support import make_request, settings
from fake_daemon import TOKEN, WAIT, FakeDaemon, serving

from bridge.errors import RunnerError
from bridge.runner.base import RunRequest
from bridge.runner.daemon import DaemonRunner


async def test_wrong_token_is_a_runner_error_naming_status_not_token(
    daemon: FakeDaemon, request_: RunRequest
) -> None:
    runner = DaemonRunner(settings(daemon.url, daemon_token="wrong-t0ken-value"))
    try:
        with pytest.raises(RunnerError) as info:
            await runner.start(request_)
    finally:
        await runner.close()
    message = str(info.value)
    assert "401" in message and daemon.url in message
    assert "wrong-t0ken-value" not in message and TOKEN not in message
    assert daemon.runs == {}


async def test_missing_token_is_refused_without_a_request(
    daemon: FakeDaemon, request_: RunRequest
) -> None:
    runner = DaemonRunner(settings(daemon.url, daemon_token=None))
    with pytest.raises(RunnerError, match="daemon_token"):
        await runner.start(request_)
    await runner.close()
    assert daemon.seen == []


async def test_unreachable_and_5xx_at_start_are_runner_errors(
    daemon: FakeDaemon, request_: RunRequest
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = DaemonRunner(settings(f"http://127.0.0.1:{port}"))
    with pytest.raises(RunnerError, match=f"127.0.0.1:{port}") as info:
        await dead.start(request_)
    assert TOKEN not in str(info.value)
    await dead.close()

    daemon.start_status = 503
    sad = DaemonRunner(settings(daemon.url))
    with pytest.raises(RunnerError, match="503") as info:
        await sad.start(request_)
    assert daemon.url in str(info.value)
    await sad.close()


async def test_close_stops_active_runs(daemon: FakeDaemon, request_: RunRequest) -> None:
    runner = DaemonRunner(settings(daemon.url), stop_grace_s=2.0)
    handle = await runner.start(request_)
    await asyncio.wait_for(runner.close(), WAIT)
    assert daemon.cancelled.is_set()
    result = await asyncio.wait_for(handle.wait(), WAIT)
    assert result.stopped and result.code == "interrupted"


class SlowCancel(FakeDaemon):
    """A daemon that accepts a cancel and takes its time to end the run (a tool call it
    lets finish, a busy machine): the run stays ``running`` until the test ends it."""

    def _cancel(self, request: web.Request) -> web.Response:
        self.cancelled.set()
        return web.json_response({"ok": True})


async def test_the_next_run_waits_until_a_stopped_run_has_ended_on_the_daemon(
    tmp_path: Path,
) -> None:
    """Stop: the daemon takes the cancel but the run is still working when the stop grace
    is over. The person hears "stopped" and sends the next message; the engine awaits the
    handle's ``settled()`` before that run ("nothing the run started is left"). It
    returned at once, so the next run started beside the old one in the same
    conversation (forking its history); it must return only once the daemon reports the
    old run over."""
    fake = SlowCancel()
    async with serving(fake):
        runner = DaemonRunner(settings(fake.url), stop_grace_s=0.3)
        try:
            handle = await runner.start(make_request(tmp_path))
            await fake.wait_polls(1)
            await asyncio.wait_for(handle.stop("stopped"), WAIT)
            result = await asyncio.wait_for(handle.wait(), WAIT)
            assert result.code == "interrupted" and result.stopped, result
            assert fake.run.state == "running"  # not over on the daemon yet

            settling = asyncio.ensure_future(handle.settled())
            polled = asyncio.ensure_future(fake.wait_polls(3))  # it keeps asking the daemon
            await asyncio.wait({settling, polled}, timeout=WAIT, return_when="FIRST_COMPLETED")
            early = settling.done()
            polled.cancel()
            await asyncio.gather(polled, return_exceptions=True)
            fake.run.finish({"ok": False, "code": "interrupted", "error": "cancelled"}, "cancelled")
            await asyncio.wait_for(settling, WAIT)
            assert not early, "settled() returned while the run still worked on the daemon"
        finally:
            await asyncio.wait_for(runner.close(), WAIT)


async def test_a_run_of_a_daemon_that_is_gone_is_settled_at_once(tmp_path: Path) -> None:
    """The daemon went away mid-run (nothing listens at its address): no run is left
    working there, so the conversation's next message is not held back waiting for it."""
    fake = FakeDaemon()
    async with serving(fake):
        runner = DaemonRunner(settings(fake.url), unreachable_s=0.3, stop_grace_s=0.3)
        handle = await runner.start(make_request(tmp_path))
        await fake.wait_polls(1)
    try:  # the server is gone
        result = await asyncio.wait_for(handle.wait(), WAIT)
        assert result.code == "daemon_unreachable", result
        await asyncio.wait_for(handle.settled(), WAIT)
    finally:
        await asyncio.wait_for(runner.close(), WAIT)
