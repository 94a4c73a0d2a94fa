"""A daemon run left working by a gateway that died (kill -9) is cancelled at the restart.

A daemon keeps a run when its client dies. Before, the restart told the person "interrupted,
send again" while the run went on working on the daemon: the message they sent again ran
beside it in the same conversation, and the two forked its history. Now the restart asks
the daemon for its runs, cancels those of the conversations it interrupted (and no one
else's: a daemon may serve other clients), and waits until the daemon reports them over.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from fake_daemon import TOKEN, FakeDaemon, FakeRun
from gateway_harness import gateway_env, wait_until
from test_crash_recovery import free_port, serve

from bridge.engine import conversation_name


@pytest.fixture
def env(
    tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int], daemon: FakeDaemon
) -> Iterator[dict[str, str]]:
    e = gateway_env(
        tmp_path / "root",
        fake_dir,
        uid_range,
        JAZZ_BRIDGE_RUNNER__BACKEND="daemon",
        JAZZ_BRIDGE_RUNNER__DAEMON_URL=daemon.url,
        JAZZ_BRIDGE_RUNNER__DAEMON_TOKEN=TOKEN,
        JAZZ_BRIDGE_RUNNER__DAEMON_POLL_S="0.02",
        JAZZ_BRIDGE_RUNNER__COMMAND=json.dumps(["/nonexistent/jazz-must-not-be-spawned"]),
    )
    e["JAZZ_BRIDGE_SERVER__PORT"] = str(free_port())
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def _keep_working(run: FakeRun) -> None:
    run.events.append({"type": "tool_call", "name": "bash"})


async def test_a_run_left_on_the_daemon_by_a_crash_is_cancelled_at_restart(
    env: dict[str, str], tmp_path: Path, daemon: FakeDaemon
) -> None:
    daemon.on_create = _keep_working
    someone_elses = FakeRun(id="run-other", body={"prompt": "x", "conversationId": "cli:mine#1"})
    daemon.runs[someone_elses.id] = someone_elses
    async with serve(env, tmp_path) as (proc, client):
        await client.post("fork", "work for a long time", key="m1")
        await wait_until(lambda: len(daemon.runs) == 2, 20, "the daemon run to start")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    (left,) = [run for run in daemon.runs.values() if run is not someone_elses]
    assert left.state == "running" and left.body["conversationId"] == conversation_name(
        "web:fork", 1
    )
    async with serve(env, tmp_path) as (proc, client):
        # ready means started: the leftover was ended before anything else ran
        assert left.state == "cancelled", f"the run left by the crash is {left.state}"
        assert someone_elses.state == "running", "another client's run was cancelled"
        statuses = await client.wait_role("fork", "status")
        assert any("interrupted" in str(m["text"]) for m in statuses), statuses
