"""End to end through the web API: the real gateway, a real runner subprocess per message."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import IS_ROOT, remove_accounts
from gateway_harness import gateway_env, released_cli, running_gateway, wait_until

from bridge.engine import conversation_name, conversation_prefix
from bridge.errors import BridgeError


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


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


async def test_queue_overflow_gets_a_clear_reply(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_LIMITS__MAX_QUEUED_PER_CONVERSATION"] = "2"
    async with running_gateway(env) as (_, client):
        await client.post("q", "hold Q1")
        await wait_until(lambda: len(client.starts("web:q")) == 1, what="Q1 started")
        for i in range(3):
            await client.post("q", f"queued {i}")
        overflow = await client.wait_role("q", "status", 3)
        assert any("not queued" in m["text"] for m in overflow)
        client.release("Q1")
        await client.wait_role("q", "assistant", 3)
        prompts = [s["prompt"] for s in client.starts("web:q")]
        assert prompts == ["hold Q1", "queued 0", "queued 1"]


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


async def test_timeout_stops_a_hung_run(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_RUNNER__TIMEOUT_S"] = "0.5"
    async with running_gateway(env) as (_, client):
        await client.post("h", "hang")
        errors = await client.wait_role("h", "error", timeout=30)
        assert "took longer than 0.5s" in errors[0]["text"]
        await client.post("h", "still serving?")
        await client.wait_role("h", "assistant")


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


async def test_a_prompt_is_answered_by_the_asker_and_refused_to_others(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("p", "approve")
        prompt = (await client.wait_role("p", "prompt"))[0]
        tokens = {c["label"]: c["token"] for c in prompt["choices"]}
        assert set(tokens) >= {"Approve", "Reject"}
        status, body = await client.press("p", tokens["Approve"], "mallory")
        assert status == 403 and "Only ada" in body["text"]
        status, body = await client.press("p", tokens["Approve"], "ada")
        assert status == 200, body
        answer = await client.wait_role("p", "assistant")
        assert "the tool was approved" in answer[0]["text"]
        status, body = await client.press("p", tokens["Reject"], "ada")
        assert status == 410 and "expired" in body["text"]


async def test_commands_are_answered_at_once(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("c", "hold C1")
        await wait_until(lambda: len(client.starts("web:c")) == 1, what="C1 started")
        await client.post("c", "/status")
        status = await client.wait_role("c", "status")
        assert any("Running" in m["text"] for m in status)
        await client.post("c", "/new")
        await client.wait_role("c", "status", 2)
        client.release("C1")
        await client.wait_role("c", "assistant")
        await client.post("c", "after new")
        await client.wait_role("c", "assistant", 2)
        convs = [s["conversation"] for s in client.starts("web:c")]
        assert convs == [conversation_name("web:c", 1), conversation_name("web:c", 2)]
        await client.post("c", "/frobnicate is not a command")
        await client.wait_role("c", "assistant", 3)
        assert client.starts("web:c")[-1]["prompt"] == "/frobnicate is not a command"


async def test_the_event_stream_carries_progress_and_the_answer(env: dict[str, str]) -> None:
    import asyncio
    import json

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


async def test_a_missing_runner_is_a_clear_reply(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_RUNNER__COMMAND"] = '["/nonexistent/jazz"]'
    async with running_gateway(env) as (_, client):
        await client.post("m", "hello")
        errors = await client.wait_role("m", "error")
        assert "/nonexistent/jazz" in errors[0]["text"]
        assert "check runner.command" in errors[0]["text"]


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


async def test_a_second_gateway_on_the_same_root_is_refused_and_touches_nothing(
    env: dict[str, str],
) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("a", "hold L")
        await wait_until(lambda: len(client.starts("web:a")) == 1, what="the first one's run")
        # the same root on another port (PORT 0): it would have taken that run for a
        # leftover of a crash, killed it and answered "interrupted"; nor does it repair
        # the root first (a changed mode the start-up repair would put back stays)
        personas = Path(env["JAZZ_BRIDGE_ROOT"]) / "personas"
        mode = personas.stat().st_mode & 0o7777
        personas.chmod(0o700)
        with pytest.raises(BridgeError, match="another jazz-bridge serve is running"):
            async with running_gateway(env):
                pass
        assert personas.stat().st_mode & 0o7777 == 0o700, "the refused one repaired the root"
        personas.chmod(mode)
        client.release("L")
        answer = (await client.wait_role("a", "assistant"))[0]["text"]
        assert "hold L" in answer
        roles = [m["role"] for m in await client.messages("a")]
        assert "error" not in roles and len(client.starts("web:a")) == 1
