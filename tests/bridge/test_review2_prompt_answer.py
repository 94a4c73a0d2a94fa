"""A typed answer to a question, passed on to the agent just before a crash, must not be
run again after the restart as a new message of its own.

The crash point: ``Engine._typed_answer`` wrote the prompt's answer (``resolve_prompt``,
committed) and the runner got it on stdin; the answering message itself was closed only
in a later write (``complete_message``) and the gateway died in between. The store is left
with the question ``answered`` and the answering message still ``accepted``. Start-up
recovery looks only at ``pending`` prompts to recognise such answers, so it requeues the
answer as a fresh turn: the agent is handed "blue" (or "2", or a redacted secret) as a new
prompt, the message being consumed twice.
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


async def test_an_answer_passed_on_before_a_crash_is_not_run_as_a_new_message(
    env: dict[str, str],
) -> None:
    async with running_gateway(env):  # creates the root and the database
        pass
    db = Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"
    key = "web:pq"
    store = SqliteStore(db)
    await store.open()
    try:
        now = time.time()
        ask, _ = await store.accept(
            Inbound(
                platform="web",
                event_id="e-ask",
                thread_key=key,
                sender_id="ada",
                sender_name="ada",
                text="which colour do you like",
                target={"thread": "pq"},
                received_at=now - 5,
            ),
            home=naming.home_name(key),
            is_command=False,
        )
        run = await store.begin_run(ask.id, "ada")
        assert run is not None
        # the run asked a question (input kind: any text ada types is the answer) ...
        await store.add_prompts(
            [
                PromptRecord(
                    token="tok1",
                    run_id=run.id,
                    conversation_id=ask.conversation_id,
                    requester="ada",
                    kind="input",
                    request_id="q1",
                    payload={"question": "colour?"},
                    created_at=now - 4,
                )
            ]
        )
        # ... ada typed "blue": accepted, then passed on (the prompt answered, noting the
        # answering message, as the gateway writes it) ...
        answering, _ = await store.accept(
            Inbound(
                platform="web",
                event_id="e-answer",
                thread_key=key,
                sender_id="ada",
                sender_name="ada",
                text="blue",
                target={"thread": "pq"},
                received_at=now - 3,
            ),
            home=naming.home_name(key),
            is_command=False,
        )
        assert await store.resolve_prompt("tok1", {"response": "blue", "byMessage": answering.id})
        # ... and the gateway died before the answering message was closed (kill -9)
    finally:
        await store.close()

    async with running_gateway(env) as (_, client):
        # the cut-off run gets its one "interrupted" notice
        await client.wait_role("pq", "status")

        async def answer_settled() -> bool:
            msgs = await client.messages("pq")
            ran = [s for s in client.starts(key) if s["prompt"] == "blue"]
            replied = [m for m in msgs if m["role"] != "user" and m.get("messageId") != ask.id]
            return bool(ran or replied)

        await wait_until(answer_settled, 20, "the typed answer to be dealt with")
        ran = [s["prompt"] for s in client.starts(key)]
        assert "blue" not in ran, (
            f"the typed answer, already handed to the agent, was run again as a new turn: {ran}"
        )
