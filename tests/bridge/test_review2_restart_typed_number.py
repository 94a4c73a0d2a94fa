"""A number typed while an approval waited on a surface with buttons is a new message,
and stays one across a restart.

The running gateway takes a typed number as a choice only on numbered surfaces (no
buttons): on the web chat (buttons) "2" typed while an approval waits is queued as a new
message and run after the approval's run (commit bc18465). Start-up recovery
(``_answered_prompt``) says it applies "the rule the running gateway applies", but still
takes any all-digit text as the answer to a pending prompt: after a crash with such a "2"
accepted, the message is never run; its sender is told that "the question this answered
ended", a question they never answered.

The real gateway (web chat, fake runner as a real subprocess); the crash is a store seeded
as a kill -9 leaves it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway, wait_until

from bridge.model import Inbound
from bridge.store import PromptRecord, SqliteStore
from provisioning import naming


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def _inbound(key: str, event: str, text: str, at: float) -> Inbound:
    return Inbound(
        platform="web",
        event_id=event,
        thread_key=key,
        sender_id="ada",
        sender_name="ada",
        text=text,
        target={"thread": key.split(":", 1)[1]},
        received_at=at,
    )


async def test_a_number_typed_while_an_approval_waited_on_buttons_runs_after_a_restart(
    env: dict[str, str],
) -> None:
    async with running_gateway(env):  # creates the root and the database
        pass
    db = Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"
    key = "web:nums"
    home = naming.home_name(key)
    store = SqliteStore(db)
    await store.open()
    try:
        now = time.time()
        ask, _ = await store.accept(
            _inbound(key, "e-ask", "deploy it", now - 5), home=home, is_command=False
        )
        run = await store.begin_run(ask.id, "ada")
        assert run is not None
        await store.add_prompts(  # the run waits on an approval, shown with buttons
            [
                PromptRecord(
                    token="ApPrOvAlToKeN01",
                    run_id=run.id,
                    conversation_id=ask.conversation_id,
                    requester="ada",
                    kind="approval",
                    request_id="call-1",
                    payload={"toolName": "bash", "message": "deploy"},
                    created_at=now - 4,
                )
            ]
        )
        # ada sends "2" (how many replicas, say): on the web chat a new message, queued
        await store.accept(_inbound(key, "e-two", "2", now - 3), home=home, is_command=False)
        # ... and the gateway dies (kill -9): the approval still pending, "2" accepted
    finally:
        await store.close()

    async with running_gateway(env) as (_, client):
        await client.wait_role("nums", "status")  # the cut-off run's "interrupted" notice

        async def settled() -> bool:
            ran = [s for s in client.starts(key) if s["prompt"] == "2"]
            told = [
                m
                for m in await client.messages("nums")
                if "ended when the gateway restarted" in m["text"]
            ]
            return bool(ran or told)

        await wait_until(settled, 20, "the message '2' to be dealt with")
        ran = [s["prompt"] for s in client.starts(key)]
        texts = [m["text"] for m in await client.messages("nums")]
        assert "2" in ran, (
            "a number typed on a surface with buttons (a new message while running) was "
            f"taken as an answer at the restart and never run; runs: {ran}; chat: {texts}"
        )
