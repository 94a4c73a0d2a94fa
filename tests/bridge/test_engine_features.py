"""The turn engine's promises, end to end with the bundled reference runner."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import plain_surface
import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway, use_reference_runner, wait_until

from bridge.model import Inbound, InboxState


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    use_reference_runner(e, fake_dir)
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def test_quick_runs_show_no_bubble_slow_runs_do(env: dict[str, str]) -> None:
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


async def test_approve_all_answers_every_pending_approval(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("two", "!approve2 deploy")
        prompts = await client.wait_role("two", "prompt", 2)
        labels = [c["label"] for c in prompts[1]["choices"]]
        assert "Approve all (2)" in labels
        token = next(
            c["token"] for c in prompts[1]["choices"] if c["label"].startswith("Approve all")
        )
        status, _ = await client.press("two", token, "ada")
        assert status == 200
        answer = (await client.wait_role("two", "assistant"))[0]["text"]
        assert "deploy was approved" in answer and "write was approved" in answer
        first = prompts[0]["choices"][0]["token"]
        status, _body = await client.press("two", first, "ada")
        assert status == 410


async def test_a_question_and_a_private_secret(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("q", "!ask favourite colour?")
        prompt = (await client.wait_role("q", "prompt"))[0]
        blue = next(c["token"] for c in prompt["choices"] if c["label"] == "Blue")
        assert (await client.press("q", blue, "ada"))[0] == 200
        assert "you answered: blue" in (await client.wait_role("q", "assistant"))[0]["text"]
        await client.post("q", "!secret API token")
        await client.wait_role("q", "prompt", 2)
        await client.post("q", "hunter2-very-secret")
        answer = (await client.wait_role("q", "assistant", 2))[1]["text"]
        assert "got a secret of 19 characters" in answer
        everything = " ".join(m["text"] for m in await client.messages("q"))
        assert "hunter2-very-secret" not in everything  # redacted from the record


async def test_degrades_to_numbered_choices_and_never_collects_a_secret_in_a_group(
    env: dict[str, str],
) -> None:
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        adapter = plain_surface.INSTANCES[-1]
        surface = adapter.surface
        gw = app.engine
        assert gw is not None

        def inbound(event: str, text: str, shared: bool) -> Inbound:
            return Inbound(
                platform="plain",
                event_id=event,
                thread_key="plain:room",
                sender_id="u1",
                sender_name="Ada",
                text=text,
                shared_chat=shared,
            )

        await gw.submit(inbound("e1", "!approve bash", True))
        await wait_until(
            lambda: any("Reply with **1** (Approve)" in t for t in surface.texts()),
            15,
            "a numbered prompt",
        )
        await gw.submit(inbound("e2", "1", True))
        await wait_until(
            lambda: any("bash was approved" in t for t in surface.texts()),
            15,
            "the approved answer",
        )
        await gw.submit(inbound("e3", "!secret DB password", True))
        await wait_until(
            lambda: any("no secret is available here (shared-chat)" in t for t in surface.texts()),
            15,
            "the secret refused",
        )
        assert any("never collected in a shared chat" in t for t in surface.texts())


async def test_a_typed_answer_to_a_prompt_answered_meanwhile_is_told_so(
    env: dict[str, str],
) -> None:
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None

        def inbound(event: str, text: str) -> Inbound:
            return Inbound(
                platform="plain", event_id=event, thread_key="plain:one", sender_id="u1", text=text
            )

        await gw.submit(inbound("e1", "!approve bash"))
        await wait_until(
            lambda: any("Reply with **1**" in t for t in surface.texts()), 15, "the prompt"
        )
        await gw.submit(inbound("e2", "1"))  # both typed before either is handled
        await gw.submit(inbound("e3", "1"))
        await wait_until(
            lambda: any("already answered" in t for t in surface.texts()), 15, "the second told"
        )
        await wait_until(
            lambda: any("bash was approved" in t for t in surface.texts()), 15, "the answer"
        )
        assert await app.store.messages_in_state(InboxState.ACCEPTED) == []


async def test_waiting_for_a_person_does_not_count_against_the_timeout(env: dict[str, str]) -> None:
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


async def test_the_global_cap_tells_who_waits(env: dict[str, str]) -> None:
    env["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "1"
    async with running_gateway(env) as (_, client):
        await client.post("a", "!delay 2")
        await client.wait_role("a", "status")  # A holds the only slot (its progress shows)
        await client.post("b", "hello")
        waiting = await client.wait_role("b", "status")
        assert "its limit" in waiting[0]["text"]
        await client.wait_role("b", "assistant", timeout=30)


async def test_artifacts_only_from_inside_the_home(env: dict[str, str], fake_dir: Path) -> None:
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


async def test_long_answers_are_split_without_breaking_code_blocks(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_, client):
        await client.post("long", "!long 60000")
        parts = await client.wait_role("long", "assistant", 3, timeout=30)
        for part in parts:
            assert len(part["text"]) <= 20_000
            assert part["text"].count("```") % 2 == 0


async def test_health_ready_and_metrics(env: dict[str, str]) -> None:
    async with running_gateway(env) as (app, client):
        await client.post("m", "hello", key="same")
        await client.post("m", "hello", key="same")
        await client.wait_role("m", "assistant")
        base = f"http://127.0.0.1:{app.port}"
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{base}/healthz") as r:
                assert r.status == 200 and (await r.json())["transports"] == {"web": "ok"}
            async with s.get(f"{base}/readyz") as r:
                assert r.status == 200
            async with s.get(f"{base}/metrics") as r:
                text = await r.text()
        assert 'jazz_bridge_messages_total{outcome="accepted",platform="web"} 1.0' in text
        assert 'jazz_bridge_messages_total{outcome="duplicate",platform="web"} 1.0' in text
        assert 'jazz_bridge_runs_total{outcome="ok"} 1.0' in text
        assert "jazz_bridge_run_duration_seconds_bucket" in text
