"""The released Jazz CLI (0.14.2) behind the real gateway, through the web API.

Its fake (``tests/fakes/fake_jazz.py``) is detected from its own ``run --help`` at start and
spoken to as that CLI wants: the prompt as its argument (in a PID namespace of its own),
approvals on stdin, closed once the envelope is read; a tool its policy covers is approved
by the CLI itself; a prompt too long for an argument goes on stdin, where no approval can
be taken; SIGTERM makes it exit 0 without an envelope; its ask tool cannot reach a person;
a $0 run of a local provider is a known cost; it has no ``jazz daemon``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from accounts_support import remove_accounts
from gateway_harness import Client, gateway_env, install_fake_runner, running_gateway, wait_until

from bridge.engine import conversation_name
from bridge.errors import ConfigError
from bridge.runner.dialect import LONG_TIMEOUT_MS, MAX_ARGV_PROMPT_BYTES

BOUND_S = 20.0  # every wait for a reply or a run's end
LIMIT_TEXT = "Today's spending limit for this gateway is reached"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    e.update(install_fake_runner(fake_dir, released=True))
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def roles(messages: list[dict[str, Any]]) -> list[str]:
    return [m["role"] for m in messages]


def ends(client: Client, thread: str) -> list[dict[str, Any]]:
    """The fake's ``end`` events of the runs of ``thread`` (it logs one as it exits)."""
    names = {s["conversation"] for s in client.starts(f"web:{thread}")}
    return [r for r in client.runs() if r["event"] == "end" and r["conversation"] in names]


def argv_of(run: dict[str, Any]) -> list[str]:
    argv = run["argv"]
    assert isinstance(argv, list)
    return argv[1:]  # after the fake's own path


async def test_a_tool_the_cli_approves_by_itself_asks_nobody(env: dict[str, str]) -> None:
    """Under runner.approval_policy = "high-risk" the released CLI approves execute_command
    itself (approval_required, then approval_resolved auto at once): no prompt, no buttons."""
    env["JAZZ_BRIDGE_RUNNER__APPROVAL_POLICY"] = "high-risk"
    async with running_gateway(env) as (_, client):
        await client.post("auto", "approve")
        (answer,) = await client.wait_role("auto", "assistant", timeout=BOUND_S)
        assert "the tool was approved" in answer["text"]
        messages = await client.messages("auto")
        assert "prompt" not in roles(messages), messages
        assert not any(m.get("choices") for m in messages), messages
        (run,) = client.starts("web:auto")
        argv = argv_of(run)
        assert argv[argv.index("--approval-policy") + 1] == "high-risk"


async def test_an_approval_is_asked_and_the_run_ends_once_answered(env: dict[str, str]) -> None:
    """Under the default policy the same tool waits for a person: buttons, Approve, the
    answer. The released CLI prints its envelope and then waits for stdin to close: the
    gateway closes it, so the run ends at once (its timeout is 900 s)."""
    async with running_gateway(env) as (_, client):
        await client.post("ask", "approve")
        (prompt,) = await client.wait_role("ask", "prompt", timeout=BOUND_S)
        assert "execute_command" in prompt["text"], prompt
        tokens = {c["label"]: c["token"] for c in prompt["choices"]}
        assert {"Approve", "Reject"} <= set(tokens), tokens
        pressed = time.monotonic()
        status, body = await client.press("ask", tokens["Approve"], "ada")
        assert status == 200, body
        (answer,) = await client.wait_role("ask", "assistant", timeout=BOUND_S)
        assert "the tool was approved" in answer["text"]
        await wait_until(lambda: len(ends(client, "ask")) == 1, BOUND_S, "the run's exit")
        assert time.monotonic() - pressed < BOUND_S
        (run,) = client.starts("web:ask")
        assert argv_of(run)[-2:] == ["--", "approve"]  # on argv: answers are read on stdin
        assert "error" not in roles(await client.messages("ask"))


async def test_a_message_too_long_for_an_argument_cannot_take_an_approval(
    env: dict[str, str],
) -> None:
    """Over 128 KiB the message goes on stdin, closed at once, and the released CLI then
    reads no approval: the run is stopped as soon as it asks, and says why (not "took
    longer than 300s", nor a prompt nobody's answer could reach)."""
    env["JAZZ_BRIDGE_RUNNER__TIMEOUT_S"] = "300"
    # the web API takes up to 100,000 characters: 3 bytes each, it is 156 kB
    text = "approve " + "€€€€ " * 12_000
    assert len(text) < 100_000 and len(text.encode()) > MAX_ARGV_PROMPT_BYTES + 1
    async with running_gateway(env) as (_, client):
        posted = time.monotonic()
        await client.post("long", text)
        (error,) = await client.wait_role("long", "error", timeout=BOUND_S)
        assert time.monotonic() - posted < BOUND_S
        reply = error["text"]
        assert "execute_command" in reply, reply
        assert "can only take when the message is passed as an argument" in reply, reply
        assert "the message is too long to pass as an argument" in reply, reply
        assert "runner.approval_policy" in reply, reply
        assert "took longer" not in reply and "Stopped by" not in reply, reply
        messages = await client.messages("long")
        assert "prompt" not in roles(messages) and "assistant" not in roles(messages)
        (run,) = client.starts("web:long")
        assert run["prompt"] == text  # it read the message whole, from stdin
        argv = argv_of(run)
        assert "--" not in argv and "€" not in " ".join(argv), argv[-3:]
        await wait_until(lambda: len(ends(client, "long")) == 1, BOUND_S, "the run's exit")


async def test_stop_of_a_held_run_says_who_stopped_it(env: dict[str, str]) -> None:
    """The released CLI exits 0 on SIGTERM, without an envelope: still "Stopped by ada"."""
    async with running_gateway(env) as (_, client):
        await client.post("s", "hold S1")
        await wait_until(lambda: len(client.starts("web:s")) == 1, BOUND_S, "S1 running")
        await client.post("s", "/stop")
        (error,) = await client.wait_role("s", "error", timeout=BOUND_S)
        assert "Stopped by ada" in error["text"], error
        await wait_until(lambda: len(ends(client, "s")) == 1, BOUND_S, "the run's exit")
        assert "assistant" not in roles(await client.messages("s"))
        client.release("S1")  # nothing is left waiting for it
        await client.post("s", "after the stop")
        answers = await client.wait_role("s", "assistant", timeout=BOUND_S)
        assert "fake answer to: after the stop" in answers[0]["text"]


async def test_a_question_the_cli_could_not_ask_is_noted(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("q", "askuser")
        (answer,) = await client.wait_role("q", "assistant", timeout=BOUND_S)
        text = answer["text"]
        assert text.startswith("User answered: 'User responded: '"), text
        assert "The agent wanted to ask “Which colour?”" in text, text
        assert "cannot ask in the chat" in text, text
        assert "prompt" not in roles(await client.messages("q"))


async def test_the_conversation_is_named_not_the_thread(env: dict[str, str]) -> None:
    thread = "room-42-secret-name"
    async with running_gateway(env) as (_, client):
        await client.post(thread, "hello there")
        (answer,) = await client.wait_role(thread, "assistant", timeout=BOUND_S)
        assert "fake answer to: hello there" in answer["text"]
        (run,) = client.starts(f"web:{thread}")
        argv = argv_of(run)
        name = conversation_name(f"web:{thread}", 1)
        assert run["conversation"] == name
        assert argv[argv.index("--conversation") + 1] == name
        joined = " ".join(argv)
        assert f"web:{thread}" not in joined and thread not in joined, argv
        assert argv[argv.index("--timeout") + 1] == str(LONG_TIMEOUT_MS)
        assert "--stream" in argv and argv[-2:] == ["--", "hello there"]
        assert "spend" not in argv[argv.index("--events") + 1].split(",")


async def said(client: Client, thread: str, text: str) -> bool:
    return any(text in m["text"] for m in await client.messages(thread))


async def two_messages(client: Client, thread: str) -> None:
    """Post one message, wait for its answer, post a second; wait until it is answered or
    refused."""
    await client.post(thread, "first of the day")
    await client.wait_role(thread, "assistant", timeout=BOUND_S)
    await client.post(thread, "second of the day")

    async def settled() -> bool:
        messages = await client.messages(thread)
        return roles(messages).count("assistant") >= 2 or await said(client, thread, LIMIT_TEXT)

    await wait_until(settled, BOUND_S, "the second message answered or refused")


async def test_a_free_local_run_does_not_close_the_daily_cap(env: dict[str, str]) -> None:
    """The fake's agent is llamacpp: costUSD 0 from a local provider is a known $0, so a
    daily cap lets the next message run (it closed the gateway for the day after one run)."""
    env["JAZZ_BRIDGE_LIMITS__DAILY_COST_USD"] = "1"
    async with running_gateway(env) as (_, client):
        await two_messages(client, "cap")
        assert not await said(client, "cap", LIMIT_TEXT)
        answers = await client.wait_role("cap", "assistant", 2, timeout=BOUND_S)
        assert "fake answer to: second of the day" in answers[1]["text"]


async def test_a_stopped_free_local_run_does_not_close_the_daily_cap(
    env: dict[str, str],
) -> None:
    """The released CLI prints no envelope when it is stopped: a /stop left an unpriced
    run, and the cap closed the gateway to everyone for the rest of the day. The home
    template's agent is llamacpp's, whose runs cost nothing, envelope or not."""
    env["JAZZ_BRIDGE_LIMITS__DAILY_COST_USD"] = "1"
    async with running_gateway(env) as (_, client):
        await client.post("capstop", "hold C1")
        await wait_until(lambda: len(client.starts("web:capstop")) == 1, BOUND_S, "C1 running")
        await client.post("capstop", "/stop")
        await client.wait_role("capstop", "error", timeout=BOUND_S)
        client.release("C1")
        await client.post("capstop", "after the stop")
        answers = await client.wait_role("capstop", "assistant", timeout=BOUND_S)
        assert "fake answer to: after the stop" in answers[0]["text"]
        assert not await said(client, "capstop", LIMIT_TEXT)


async def test_an_unpriced_documented_run_closes_the_daily_cap(
    env: dict[str, str], fake_dir: Path
) -> None:
    """The documented runner's fake prints costKnown false: the spend is unknown, and the
    cap refuses the next message, saying why."""
    env.update(install_fake_runner(fake_dir, released=False))
    env["JAZZ_BRIDGE_LIMITS__DAILY_COST_USD"] = "1"
    async with running_gateway(env) as (_, client):
        await two_messages(client, "cap")
        refusal = [m for m in await client.messages("cap") if LIMIT_TEXT in m["text"]]
        assert len(refusal) == 1, await client.messages("cap")
        assert "1 run(s) today had no price, so the spend is unknown" in refusal[0]["text"]
        assert roles(await client.messages("cap")).count("assistant") == 1
        assert len(client.starts("web:cap")) == 1  # the second never ran


async def test_the_daemon_backend_with_the_released_cli_refuses_to_start(
    env: dict[str, str], fake_dir: Path
) -> None:
    env["JAZZ_BRIDGE_RUNNER__BACKEND"] = "daemon"
    runner = json.loads(env["JAZZ_BRIDGE_RUNNER__COMMAND"])
    with pytest.raises(ConfigError, match="jazz daemon") as refused:
        async with running_gateway(env):
            pytest.fail("a daemon backend started with a CLI that has no `jazz daemon`")
    message = str(refused.value)
    assert runner[0] in message and "released Jazz CLI 0.14.2" in message, message
    assert 'set runner.backend = "cli"' in message, message
    assert not list(fake_dir.glob("run-*.log"))  # nothing ran


async def test_a_message_with_a_nul_cannot_take_an_approval_and_is_told_why(
    env: dict[str, str],
) -> None:
    """No argument holds a NUL: such a message goes on stdin too, and its reply said "the
    message is too long to pass as an argument" of a message 13 characters long."""
    async with running_gateway(env) as (_, client):
        await client.post("nul", "approve \u0000 this")
        (error,) = await client.wait_role("nul", "error", timeout=BOUND_S)
        reply = error["text"]
        assert "execute_command" in reply, reply
        assert "the message contains a NUL character" in reply, reply
        assert "too long" not in reply, reply
