"""A message's turn end to end through the web API: the real gateway, a real runner
subprocess per message (the fake of the run contract, or the bundled reference runner).

One run per message as the conversation's own account, one at a time per conversation; the
runner's failures, a timeout and a missing runner become clear replies; what the run gets
(its environment) and what its answer becomes (mended, split, its artifacts checked, its
progress shown or not) on the way to the chat.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from accounts_support import IS_ROOT
from gateway_harness import (
    gateway_env,
    released_cli,
    running_gateway,
    use_reference_runner,
    wait_until,
)

from bridge.engine import conversation_name, conversation_prefix
from bridge.errors import ConfigError
from bridge.runner.command import shared_interpreter


async def test_a_message_is_one_run_as_the_conversations_account(env: dict[str, str]) -> None:
    async with running_gateway(env) as (app, client):
        await client.post("t1", "-rf hello secret words")
        answers = await client.wait_role("t1", "assistant")
        assert "fake answer to: -rf hello secret words" in answers[0]["text"]
        starts = client.starts("web:t1")
        assert len(starts) == 1
        run = starts[0]
        if released_cli():  # its only way to take approvals: the last argument, after --
            assert run["argv"][-2:] == ["--", "-rf hello secret words"]
            options = run["argv"][:-2]
        else:  # the chat text never goes on the command line
            options = run["argv"]
        assert not any("hello" in a or "secret" in a or a == "-rf" for a in options)
        assert "web:t1" not in " ".join(run["argv"])  # the thread key neither
        assert run["conversation"] == conversation_name("web:t1", 1)
        assert run["prompt"] == "-rf hello secret words"
        if IS_ROOT:
            home = app.provisioned.homes.ensure("web:t1")  # type: ignore[union-attr]
            assert run["uid"] == home.account.uid != 0
            assert run["gid"] == home.account.gid
            assert set(run["groups"]) <= {home.account.gid}  # no supplementary groups
            assert run["umask"] == 0o027
        else:
            assert run["umask"] == 0o077
        assert "FAKE_DIR" in run["env"]
        assert not [v for v in run["env"] if v.startswith("JAZZ_BRIDGE_")]
        user = [m for m in await client.messages("t1") if m["role"] == "user"]
        assert [m["text"] for m in user] == ["-rf hello secret words"]


NAME = "JB_TEST_PROVIDER_KEY"


async def test_the_run_sees_the_variable_under_the_name_configured(env: dict[str, str]) -> None:
    """A run variable set as ``JAZZ_BRIDGE_RUNNER__EXTRA_ENV__<NAME>`` (every key is
    overridable as ``JAZZ_BRIDGE_<SECTION>__<KEY>``, and pydantic-settings also takes a
    table's entries one variable each) arrived lower-cased: the settings are
    case-insensitive, so every run got ``openai_api_key`` instead of ``OPENAI_API_KEY``,
    and the provider key silently did nothing (environment names are case-sensitive on
    Unix). The name is kept as written, or refused at start naming the JSON form."""
    env[f"JAZZ_BRIDGE_RUNNER__EXTRA_ENV__{NAME}"] = "sk-runenv-0123456789"
    try:
        gateway = running_gateway(env)
        app_client = await gateway.__aenter__()
    except ConfigError:
        return  # refused at start: fine
    try:
        _, client = app_client
        await client.post("envcase", "hello")
        await client.wait_role("envcase", "assistant")
        [start] = client.starts("web:envcase")
        names = set(start["env"])
        assert json.loads(env["JAZZ_BRIDGE_RUNNER__EXTRA_ENV"]).keys() <= names  # JSON form ok
        assert NAME in names, f"the run got {sorted(n for n in names if 'provider' in n.lower())}"
    finally:
        await gateway.__aexit__(None, None, None)


async def test_duplicate_idempotency_key_runs_once(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        first = await client.post("dup", "once please", key="k-1")
        second = await client.post("dup", "once please", key="k-1")
        assert first["id"] == second["id"]
        assert (first["duplicate"], second["duplicate"]) == (False, True)
        await client.wait_role("dup", "assistant")
        third = await client.post("dup", "again", key="k-2")
        assert not third["duplicate"]
        await client.wait_role("dup", "assistant", 2)
        assert len(client.starts("web:dup")) == 2


async def test_one_run_per_conversation_while_conversations_overlap(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("a", "hold A1")
        await wait_until(lambda: len(client.starts("web:a")) == 1, what="A1 started")
        await client.post("a", "second in a")
        await client.post("b", "hold B1")
        # B runs while A1 is still held: conversations overlap
        await wait_until(lambda: len(client.starts("web:b")) == 1, what="B1 started")
        assert len(client.starts("web:a")) == 1  # A's second waits behind A1
        queued = await client.wait_role("a", "status")
        assert any("Queued" in m["text"] for m in queued)
        client.release("A1")
        await client.wait_role("a", "assistant", 2)
        client.release("B1")
        await client.wait_role("b", "assistant")
        runs = client.runs()
        a_events = [
            (r["event"], r["pid"])
            for r in runs
            if r["conversation"].startswith(conversation_prefix("web:a"))
        ]
        # strictly start, end, start, end: never two at once in one conversation
        assert [e for e, _ in a_events] == ["start", "end", "start", "end"]


async def test_timeout_stops_a_hung_run(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_RUNNER__TIMEOUT_S"] = "0.5"
    async with running_gateway(env) as (_, client):
        await client.post("h", "hang")
        errors = await client.wait_role("h", "error", timeout=30)
        assert "took longer than 0.5s" in errors[0]["text"]
        await client.post("h", "still serving?")
        await client.wait_role("h", "assistant")


async def test_waiting_for_a_person_does_not_count_against_the_timeout(
    env: dict[str, str], fake_dir: Path
) -> None:
    use_reference_runner(env, fake_dir)
    env["JAZZ_BRIDGE_RUNNER__TIMEOUT_S"] = "1"
    env["JAZZ_BRIDGE_RUNNER__KILL_GRACE_S"] = "0.5"
    async with running_gateway(env) as (_, client):
        await client.post("w", "!approve bash")
        prompt = (await client.wait_role("w", "prompt"))[0]
        await asyncio.sleep(3.5)  # the thing under test: time passing while a person thinks
        # past the 1 s timeout (plus its grace), the run still waits for the person
        assert not [m for m in await client.messages("w") if m["role"] == "error"]
        status, _ = await client.press("w", prompt["choices"][0]["token"], "ada")
        assert status == 200
        answer = (await client.wait_role("w", "assistant"))[0]["text"]
        assert "bash was approved" in answer
        await client.post("w", "!delay 5")
        error = (await client.wait_role("w", "error", timeout=30))[0]["text"]
        assert "timed out" in error or "took longer" in error


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        # the released CLI exits 0 or 1 only
        ("crash", f"printed no envelope (exit code {1 if released_cli() else 3}"),
        ("garbage", "printed something that is not an envelope (exit code 1"),
        ("noenvelope", "printed no envelope (exit code 0"),
    ],
)
async def test_runner_failures_become_clear_replies(
    env: dict[str, str], word: str, expected: str
) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("f", word)
        errors = await client.wait_role("f", "error")
        assert expected in errors[0]["text"]
        await client.post("g", "others keep being served")
        await client.wait_role("g", "assistant")


async def test_a_missing_runner_is_a_clear_reply(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_RUNNER__COMMAND"] = '["/nonexistent/jazz"]'
    async with running_gateway(env) as (_, client):
        await client.post("m", "hello")
        errors = await client.wait_role("m", "error")
        assert "/nonexistent/jazz" in errors[0]["text"]
        assert "check runner.command" in errors[0]["text"]


async def test_quick_runs_show_no_bubble_slow_runs_do(env: dict[str, str], fake_dir: Path) -> None:
    use_reference_runner(env, fake_dir)
    env["JAZZ_BRIDGE_PROGRESS__FIRST_AFTER_S"] = "1.0"
    async with running_gateway(env) as (app, client):
        web = app.engine.surfaces["web"]  # type: ignore[union-attr]
        await client.post("quick", "hello")
        answer = (await client.wait_role("quick", "assistant"))[0]
        assert "price unavailable" in answer["text"]  # summary closes the turn
        assert not web.live.get("quick")  # type: ignore[attr-defined]
        await client.post("slow", "!tools 2 !delay 2")
        await wait_until(lambda: bool(web.live.get("slow")), 10, "a progress bubble")  # type: ignore[attr-defined]
        live = next(iter(web.live["slow"].values()))  # type: ignore[attr-defined]
        await wait_until(lambda: bool(live["choices"]), 10, "the bubble's Stop button")
        stop = live["choices"][0]["token"]
        await client.wait_role("slow", "assistant")
        bubble = next(iter(web.live["slow"].values()))  # type: ignore[attr-defined]
        assert bubble["text"].startswith("✓ 2 tools")  # closed with the summary
        assert not bubble["choices"]  # the Stop button is gone
        # a Stop pressed just too late (on a screen still showing it) keeps the summary
        status, body = await client.press("slow", stop, "ada")
        assert status == 410, body
        bubble = next(iter(web.live["slow"].values()))  # type: ignore[attr-defined]
        assert bubble["text"].startswith("✓ 2 tools"), bubble


async def test_the_event_stream_carries_progress_and_the_answer(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        async with client.session.get(f"{client.base}/api/threads/sse/events") as stream:
            assert stream.headers["Content-Type"].startswith("text/event-stream")
            assert (await stream.content.readline()).startswith(b": connected")
            await client.post("sse", "approve")
            seen: list[dict[str, object]] = []

            async def read() -> None:
                async for raw in stream.content:
                    line = raw.decode().strip()
                    if line.startswith("data: "):
                        event = json.loads(line[6:])
                        seen.append(event)
                        if event.get("role") == "prompt":
                            token = event["choices"][0]["token"]  # type: ignore[index]
                            await client.press("sse", str(token), "ada")
                        if event.get("role") == "assistant":
                            return

            await asyncio.wait_for(read(), timeout=20)
        roles = [e.get("role") for e in seen]
        assert "prompt" in roles and roles[-1] == "assistant"


async def test_artifacts_only_from_inside_the_home(env: dict[str, str], fake_dir: Path) -> None:
    use_reference_runner(env, fake_dir)
    async with running_gateway(env) as (_app, client):
        await client.post("art", "!artifact plot.png")
        answers = await client.wait_role("art", "assistant", 2)
        assert any(str(m["file"]).endswith("workspace/plot.png") for m in answers)
    env2 = gateway_env(
        Path(env["JAZZ_BRIDGE_ROOT"]),
        fake_dir,
        (int(env["JAZZ_BRIDGE_ACCOUNTS__UID_MIN"]), int(env["JAZZ_BRIDGE_ACCOUNTS__UID_MAX"])),
    )
    async with running_gateway(env2) as (_app, client):
        await client.post("evil", "artifact-outside")
        notes = await client.wait_role("evil", "status")
        assert any("outside the conversation's home" in m["text"] for m in notes)
        assert not [m for m in await client.messages("evil") if m.get("file")]


async def test_long_answers_are_split_without_breaking_code_blocks(
    env: dict[str, str], fake_dir: Path
) -> None:
    use_reference_runner(env, fake_dir)
    async with running_gateway(env) as (_, client):
        await client.post("long", "!long 60000")
        parts = await client.wait_role("long", "assistant", 3, timeout=30)
        for part in parts:
            assert len(part["text"]) <= 20_000
            assert part["text"].count("```") % 2 == 0


CUT = "The list, cut short: \\ud83d and \\udc00 but \\ud83d\\ude00 is whole"

CUT_RUNNER = (
    "import sys\n"
    "sys.stdin.readline()\n"
    'print(\'{"ok": true, "answer": "' + CUT.replace("\\", "\\\\") + '", "costUSD": 0, '
    '"costKnown": false, "tokenUsage": {}, "toolCalls": [], "artifacts": []}\', '
    "flush=True)\n"
)

MENDED = "The list, cut short: \ufffd and \ufffd but \U0001f600 is whole"


def use_cut_runner(env: dict[str, str], fake_dir: Path) -> None:
    """A runner whose answer is cut between the two halves of an emoji (as a runner written
    in JavaScript prints it: JSON with a lone surrogate)."""
    runner = fake_dir / "cut_runner.py"
    runner.write_text(CUT_RUNNER)
    os.chmod(runner, 0o755)
    env["JAZZ_BRIDGE_RUNNER__COMMAND"] = json.dumps([shared_interpreter(), str(runner)])


async def test_a_cut_answer_reaches_the_web_chat(env: dict[str, str], fake_dir: Path) -> None:
    use_cut_runner(env, fake_dir)
    async with running_gateway(env) as (_app, client):
        await client.post("cut", "list")
        (answer,) = await client.wait_role("cut", "assistant")
        assert answer["text"].startswith(MENDED), answer
