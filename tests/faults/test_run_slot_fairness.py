"""One user holds every run slot (hostile input: issue 21, item 4).

``limits.max_concurrent_runs`` was a bare semaphore taken first come, first served: one
user's eight long runs made an unrelated conversation wait 89 s, and with the defaults (a
run may take 900 s, a prompt nobody answers holds its slot up to an hour) one person could
keep everyone else waiting for an hour. Now one person has at most
``limits.max_runs_per_user`` (2) runs going and one team or chat at most
``limits.max_runs_per_team`` (3); a waiter held back by its own cap does not hold up those
behind it; and a run waiting for a person's answer gives its gateway slot back while it
waits. The waiting person is told why.

Each test uses the defaults for the new keys (only ``max_concurrent_runs``, a key the code
before had too, is set): the defaults are what must hold, and the tests fail on the code
before for what it did, not for a key it did not know. The real gateway in process, the web
chat (or a plain platform of the tests' own, whose thread keys carry a team) and real runner
subprocesses; every wait is bounded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from accounts_support import remove_accounts
from faults_support import Client, gateway_env, running_gateway, wait_until
from plain_surface import INSTANCES, SPEC  # tests/bridge, on the path by faults_support

from bridge.model import Inbound

pytestmark = pytest.mark.faults

START_BOUND_S = 15.0  # "at once": well inside the fake runner's 60 s hold
WAITING_MARK = "🕐"  # how a note saying why a message waits for a run slot begins


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    e["JAZZ_BRIDGE_ISOLATION"] = "off"  # six runs at once: accounts would only slow them
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def statuses(client: Client, thread: str) -> list[str]:
    """The thread's "waits for a slot" notes (a running run's progress bubble, also a status
    message, is not one)."""
    return [
        m["text"]
        for m in await client.messages(thread)
        if m["role"] == "status" and m["text"].startswith(WAITING_MARK)
    ]


async def test_one_users_six_held_runs_leave_room_for_another_users_message(
    env: dict[str, str],
) -> None:
    """One person posts six long runs in six threads (max_concurrent_runs 4, the default
    per-user cap 2): another person's message in another thread starts at once."""
    env["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "4"
    threads = [f"hog{i}" for i in range(1, 7)]
    async with running_gateway(env) as (_, client):
        try:
            for thread in threads:
                await client.post(thread, f"hold {thread}", user="hog")

            async def placed() -> bool:  # each of the six has either started or waits, told
                told = [t for t in threads if await statuses(client, t)]
                return len(client.starts()) + len(told) == len(threads)

            await wait_until(placed, 20, "the six runs of one person started or told to wait")
            await client.post("other", "hello from ada", user="ada")
            try:
                await wait_until(
                    lambda: len(client.starts("web:other")) == 1,
                    START_BOUND_S,
                    "ada's run",
                )
            except AssertionError:
                raise AssertionError(
                    f"ada's message did not start within {START_BOUND_S:.0f}s: one person's "
                    f"held runs took every run slot ({len(client.starts())} of them running)"
                ) from None
            answer = (await client.wait_role("other", "assistant"))[0]["text"]
            assert "fake answer to: hello from ada" in answer, answer
            assert await statuses(client, "other") == []  # ada waited for nothing
            hog_runs = [s for s in client.starts() if s["prompt"].startswith("hold hog")]
            assert len(hog_runs) == 2, [s["prompt"] for s in hog_runs]  # the per-user cap
            told = {t: await statuses(client, t) for t in threads}
            waiting = [t for t, texts in told.items() if texts]
            assert len(waiting) == 4, told
            for thread in waiting:  # told once each, and why: their own runs
                (text,) = told[thread]
                assert "You already have 2 runs going" in text, text
        finally:
            for thread in threads:
                client.release(thread)
        await wait_until(  # every one of the six runs in the end (two at a time)
            lambda: len([s for s in client.starts() if s["prompt"].startswith("hold hog")]) == 6,
            60,
            "the six runs of one person, two at a time",
        )


def plain(n: int, thread: str, user: str, text: str) -> Inbound:
    return Inbound(platform="plain", event_id=f"e{n}", thread_key=thread, sender_id=user, text=text)


async def test_one_team_does_not_hold_every_run_slot(env: dict[str, str], fake_dir: Path) -> None:
    """Two people of one team (workspace, chat) post four long runs (two each: within the
    per-user cap), max_concurrent_runs 4: the team runs three (its default cap) and someone
    of another team starts at once; the team's fourth is told why it waits."""
    env["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "4"
    team = [("plain:T1:a", "u1"), ("plain:T1:b", "u1"), ("plain:T1:c", "u2"), ("plain:T1:d", "u2")]
    async with running_gateway(env, {"plain": SPEC}) as (app, client):
        surface = INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None

        def runs(prefix: str) -> list[dict[str, Any]]:
            return [s for s in client.starts() if s["prompt"].startswith(prefix)]

        def waiting_texts() -> list[str]:
            return [t for t in surface.texts() if t.startswith("🕐")]

        try:
            for n, (thread, user) in enumerate(team):
                await gw.submit(plain(n, thread, user, f"hold T1{thread[-1]}"))
            await wait_until(
                lambda: len(runs("hold T1")) + len(waiting_texts()) == len(team),
                20,
                "the team's four runs started or told to wait",
            )
            await gw.submit(plain(9, "plain:T2:x", "u3", "hold T2x"))
            try:
                await wait_until(lambda: len(runs("hold T2x")) == 1, START_BOUND_S, "u3's run")
            except AssertionError:
                raise AssertionError(
                    f"the run of another team did not start within {START_BOUND_S:.0f}s: one "
                    f"team's runs took every run slot ({len(runs('hold T1'))} of them running)"
                ) from None
            assert len(runs("hold T1")) == 3, [s["prompt"] for s in runs("hold T1")]
            (text,) = waiting_texts()
            assert "Your team or chat already has 3 runs going" in text, text
        finally:
            for name in ("T1a", "T1b", "T1c", "T1d", "T2x"):
                client.release(name)
        await wait_until(lambda: len(runs("hold T1")) == 4, 60, "the team's fourth run")


async def test_runs_waiting_on_approvals_do_not_keep_a_third_user_waiting(
    env: dict[str, str],
) -> None:
    """Two runs wait for their people to approve a tool (max_concurrent_runs 2): a third
    person's message starts at once (it waited up to limits.prompt_wait_s, an hour, before).
    Once answered, the two runs go on at once, though that takes the gateway over its cap
    for a moment: an answer never waits for a slot."""
    env["JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS"] = "2"
    async with running_gateway(env) as (_, client):
        try:
            await client.post("p1", "approve", user="u1")
            await client.post("p2", "approve", user="u2")
            prompts = {t: (await client.wait_role(t, "prompt"))[0] for t in ("p1", "p2")}
            await client.post("c", "hold C", user="u3")
            try:
                await wait_until(lambda: len(client.starts("web:c")) == 1, START_BOUND_S, "C")
            except AssertionError:
                told = await statuses(client, "c")
                raise AssertionError(
                    f"u3's message did not start within {START_BOUND_S:.0f}s while two runs "
                    f"only waited for their people to answer (told: {told})"
                ) from None
            assert await statuses(client, "c") == []
            for thread, user in (("p1", "u1"), ("p2", "u2")):  # C is still running
                tokens = {c["label"]: c["token"] for c in prompts[thread]["choices"]}
                status, body = await client.press(thread, tokens["Approve"], user)
                assert status == 200, body
            for thread in ("p1", "p2"):  # both answered while C holds its slot: over the cap
                answer = (await client.wait_role(thread, "assistant", timeout=START_BOUND_S))[0]
                assert "the tool was approved" in answer["text"], answer
            c_run = client.starts("web:c")[0]["conversation"]
            ended = [e for e in client.runs() if e["event"] == "end"]
            assert not [e for e in ended if e["conversation"] == c_run]  # C was still running
        finally:
            client.release("C")
        answer = (await client.wait_role("c", "assistant"))[0]["text"]
        assert "hold C" in answer, answer
