"""Review: "/new <question>" typed while the agent waits for that person's answer.

The question is the fresh conversation's first message (the gateway says so: "what you
wrote after /new is its first message"). It was taken instead as the typed answer to the
question of the run in progress, in the conversation /new had just closed: the old run
went on with it as its answer, and the fresh conversation's first message never ran.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import plain_surface
import pytest
from accounts_support import remove_accounts
from gateway_harness import (
    gateway_env,
    install_fake_runner,
    running_gateway,
    use_reference_runner,
    wait_until,
)

from bridge.model import Inbound, InboxState
from bridge.store import PromptRecord, SqliteStore
from provisioning import naming

KEY = "plain:newq"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    use_reference_runner(e, fake_dir)
    e["JAZZ_BRIDGE_ISOLATION"] = "off"
    e["JAZZ_BRIDGE_LIMITS__PROMPT_WAIT_S"] = "2"  # the old run's question ends unanswered
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def inbound(event_id: str, text: str) -> Inbound:
    return Inbound(platform="plain", event_id=event_id, thread_key=KEY, sender_id="u1", text=text)


async def test_new_with_a_question_while_a_question_waits_starts_the_fresh_conversation(
    env: dict[str, str],
) -> None:
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        gw = app.engine
        assert gw is not None and app.store is not None
        await gw.submit(inbound("e1", "!ask Which colour?"))
        await wait_until(
            lambda: any("Which colour?" in t for t in surface.texts()), 20, "the question shown"
        )
        fresh = await gw.submit(inbound("e2", "/new tell me about owls"))

        async def done() -> bool:
            msg = await app.store.get_message(fresh.message_id or 0)
            return msg is not None and msg.state not in (InboxState.ACCEPTED, InboxState.RUNNING)

        await wait_until(done, 30, "the fresh conversation's first message answered")
        texts = surface.texts()
        assert not any("you answered: tell me about owls" in t for t in texts), (
            f"the question after /new went to the old run as its answer: {texts}"
        )
        msg = await app.store.get_message(fresh.message_id or 0)
        assert msg is not None
        runs = [r for r in await app.store.runs(msg.conversation_id) if r.message_id == msg.id]
        assert len(runs) == 1 and runs[0].epoch == 2, runs


async def test_new_with_a_question_left_by_a_crash_beside_a_question_runs_after_it(
    env: dict[str, str], fake_dir: Path
) -> None:
    """The same, cut off by a crash: the question after /new was accepted while the run's
    question waited, and the gateway died. The start took it for the typed answer to that
    question ("The question this answered ended..."): never run."""
    env.update(install_fake_runner(fake_dir))
    async with running_gateway(env, {"plain": plain_surface.SPEC}):  # the root, the database
        pass
    store = SqliteStore(Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db")
    await store.open()
    try:
        now = time.time()
        ask, _ = await store.accept(
            Inbound(
                platform="plain",
                event_id="e-ask",
                thread_key=KEY,
                sender_id="u1",
                text="which colour",
                received_at=now - 5,
            ),
            home=naming.home_name(KEY),
            is_command=False,
        )
        run = await store.begin_run(ask.id, "u1")
        assert run is not None
        await store.add_prompts(
            [
                PromptRecord(
                    token="tok1",
                    run_id=run.id,
                    conversation_id=ask.conversation_id,
                    requester="u1",
                    kind="input",
                    request_id="q1",
                    payload={"question": "colour?"},
                    created_at=now - 4,
                )
            ]
        )
        # "/new tell me about owls", accepted as submit accepts it: the question, a fresh epoch
        fresh, _ = await store.accept(
            Inbound(
                platform="plain",
                event_id="e-new",
                thread_key=KEY,
                sender_id="u1",
                text="tell me about owls",
                received_at=now - 3,
            ),
            home=naming.home_name(KEY),
            is_command=False,
            starts_epoch=True,
        )
    finally:
        await store.close()
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        assert app.store is not None

        async def done() -> bool:
            msg = await app.store.get_message(fresh.id)  # type: ignore[union-attr]
            return msg is not None and msg.state not in (InboxState.ACCEPTED, InboxState.RUNNING)

        await wait_until(done, 30, "the fresh conversation's first message answered")
        await wait_until(
            lambda: any("owls" in t for t in surface.texts()), 20, "its reply delivered"
        )
        assert any("fake answer to: tell me about owls" in t for t in surface.texts()), (
            surface.texts()
        )
