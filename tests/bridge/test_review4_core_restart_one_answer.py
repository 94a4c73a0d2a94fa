"""Review: after a crash, only one message answers a question that was waiting.

The agent asked a question; the person typed their answer and then another message, and the
gateway died before the answer was passed on. Running, the gateway takes the first for the
answer and queues the second to run after; the start took every message typed after the
question for its answer: the second was never run ("If it was a new message, send it
again").
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import plain_surface
import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, install_fake_runner, running_gateway, wait_until

from bridge.model import Inbound, InboxState
from bridge.store import PromptRecord, SqliteStore
from provisioning import naming

KEY = "plain:oneanswer"


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    e["JAZZ_BRIDGE_ISOLATION"] = "off"
    e.update(install_fake_runner(fake_dir))
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def inbound(event_id: str, text: str, at: float) -> Inbound:
    return Inbound(
        platform="plain",
        event_id=event_id,
        thread_key=KEY,
        sender_id="u1",
        text=text,
        received_at=at,
    )


async def test_a_message_typed_after_the_answer_runs_after_a_crash(env: dict[str, str]) -> None:
    async with running_gateway(env, {"plain": plain_surface.SPEC}):  # the root, the database
        pass
    store = SqliteStore(Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db")
    await store.open()
    try:
        now = time.time()
        home = naming.home_name(KEY)
        ask, _ = await store.accept(
            inbound("e1", "which colour", now - 5), home=home, is_command=False
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
        answer, _ = await store.accept(inbound("e2", "blue", now - 3), home=home, is_command=False)
        later, _ = await store.accept(
            inbound("e3", "and now tell me about owls", now - 2), home=home, is_command=False
        )
    finally:
        await store.close()  # the gateway died here (kill -9): nothing passed on yet
    async with running_gateway(env, {"plain": plain_surface.SPEC}) as (app, _):
        surface = plain_surface.INSTANCES[-1].surface
        assert app.store is not None

        async def closed(message_id: int) -> bool:
            msg = await app.store.get_message(message_id)  # type: ignore[union-attr]
            return msg is not None and msg.state not in (InboxState.ACCEPTED, InboxState.RUNNING)

        await wait_until(lambda: closed(answer.id), 20, "the answer dealt with")
        await wait_until(lambda: closed(later.id), 20, "the later message dealt with")
        await wait_until(lambda: len(surface.texts()) >= 3, 20, "three replies")
        texts = surface.texts()
        assert any("fake answer to: and now tell me about owls" in t for t in texts), (
            f"the message typed after the answer was not run after the restart: {texts}"
        )
        assert not any("fake answer to: blue" in t for t in texts), texts
