"""The daemon backend through the whole gateway: web API -> turn engine -> fake Jazz daemon.

``runner.backend = "daemon"`` set by environment, as an operator would; the fake daemon
checks the bearer token, refuses an ``Origin`` and needs the operator token to approve.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from fake_daemon import OPERATOR, SUCCESS, TOKEN, WAIT, FakeDaemon, FakeRun
from gateway_harness import gateway_env, running_gateway, wait_until

from bridge.engine import conversation_name


@pytest.fixture
def env(
    tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int], daemon: FakeDaemon
) -> Iterator[dict[str, str]]:
    yield gateway_env(
        tmp_path / "root",
        fake_dir,
        uid_range,
        JAZZ_BRIDGE_RUNNER__BACKEND="daemon",
        JAZZ_BRIDGE_RUNNER__DAEMON_URL=daemon.url,
        JAZZ_BRIDGE_RUNNER__DAEMON_TOKEN=TOKEN,
        JAZZ_BRIDGE_RUNNER__DAEMON_OPERATOR_TOKEN=OPERATOR,
        JAZZ_BRIDGE_RUNNER__DAEMON_POLL_S="0.02",
        JAZZ_BRIDGE_RUNNER__COMMAND=json.dumps(["/nonexistent/jazz-must-not-be-spawned"]),
    )
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def _succeed(run: FakeRun) -> None:
    run.events.append({"type": "tool_call", "name": "bash"})
    run.finish(SUCCESS)


def _park_for_approval(run: FakeRun) -> None:
    run.state = "input-required"
    run.pending = {"kind": "approval", "toolCallId": "tc-7", "toolName": "bash", "message": "ls?"}


async def test_a_web_message_is_one_daemon_run_and_its_answer_lands_in_the_thread(
    env: dict[str, str], daemon: FakeDaemon
) -> None:
    daemon.on_create = _succeed
    async with running_gateway(env) as (_, client):
        await client.post("d1", "-rf say hello")
        answers = await client.wait_role("d1", "assistant")
        assert "Hello **there**" in answers[0]["text"]
        assert [run.body for run in daemon.runs.values()] == [
            {
                "agent": "default",
                "prompt": "-rf say hello",
                "conversationId": conversation_name("web:d1", 1),
            }
        ]
        assert daemon.origins == []
        assert all(s.headers["Authorization"] == f"Bearer {TOKEN}" for s in daemon.seen)
        # no process was spawned for the run: the CLI runner command does not even exist
        assert not [m for m in await client.messages("d1") if m["role"] == "error"]


async def test_a_prompt_answered_on_the_web_reaches_the_daemons_answer_endpoint(
    env: dict[str, str], daemon: FakeDaemon
) -> None:
    daemon.on_create = _park_for_approval
    async with running_gateway(env) as (_, client):
        await client.post("d2", "please list files")
        prompt = (await client.wait_role("d2", "prompt"))[0]
        tokens = {c["label"]: c["token"] for c in prompt["choices"]}
        status, body = await client.press("d2", tokens["Approve"], "mallory")
        assert status == 403 and "Only ada" in body["text"]
        assert daemon.answers == []  # a refused press never reaches the daemon
        status, body = await client.press("d2", tokens["Approve"], "ada")
        assert status == 200, body
        answers = await client.wait_role("d2", "assistant")
        assert "Hello **there**" in answers[0]["text"]
        (answer,) = daemon.answers
        assert answer.path == f"/runs/{daemon.run.id}/answer"
        assert answer.body == {"toolCallId": "tc-7", "approved": True}
        assert answer.headers["X-Jazz-Operator-Token"] == OPERATOR


async def test_stop_cancels_the_daemon_run(env: dict[str, str], daemon: FakeDaemon) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("d3", "work for a long time")  # the fake keeps it running
        await asyncio.wait_for(daemon.created.wait(), WAIT)
        await client.post("d3", "/stop", user="mallory")
        refused = await client.wait_role("d3", "status")
        assert any("Only ada" in m["text"] for m in refused)
        assert not daemon.cancelled.is_set()
        await client.post("d3", "/stop")
        errors = await client.wait_role("d3", "error")
        assert "Stopped by ada" in errors[0]["text"]
        assert daemon.cancelled.is_set()
        assert [(s.method, s.path) for s in daemon.seen if "cancel" in s.path] == [
            ("POST", f"/runs/{daemon.run.id}/cancel")
        ]
        await wait_until(lambda: daemon.run.state == "cancelled", what="the run cancelled")
