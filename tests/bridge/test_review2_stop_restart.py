"""A ``/stop`` persisted just before a crash stops, after the restart, a message it was
never meant for.

Before the crash: ada's first message is running, her second waits behind it, and she sends
``/stop`` (for the run she sees working). The ``/stop`` is accepted (acknowledged) and the
gateway is killed before it is answered. At the restart the running message is answered
"interrupted, send again" (right), the second message is requeued and taken off its queue
first, and the requeued ``/stop`` then finds it as the run "about to start" and stops it as
it starts. The second message, which the person never asked to stop and which the live
gateway would have run after the stopped one, is never run: it is answered "Stopped".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway, wait_until

from bridge.model import Inbound
from bridge.store import SqliteStore
from provisioning import naming


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def _inbound(event_id: str, text: str) -> Inbound:
    return Inbound(
        platform="web",
        event_id=event_id,
        thread_key="web:st",
        sender_id="ada",
        sender_name="ada",
        text=text,
        target={"thread": "st"},
    )


async def test_a_stop_left_by_a_crash_does_not_stop_the_next_message(env: dict[str, str]) -> None:
    async with running_gateway(env):  # creates the root and the database
        pass
    db = Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"
    home = naming.home_name("web:st")
    store = SqliteStore(db)
    await store.open()
    try:
        first, _ = await store.accept(_inbound("e1", "first question"), home=home, is_command=False)
        assert await store.begin_run(first.id, "ada") is not None  # running at the crash
        second, _ = await store.accept(
            _inbound("e2", "hold m2 second"), home=home, is_command=False
        )
        stop, _ = await store.accept(_inbound("e3", "/stop"), home=home, is_command=True)
    finally:
        await store.close()

    async with running_gateway(env) as (_, client):

        async def second_answered() -> bool:
            if client.starts("web:st"):
                client.release("m2")  # the second message's run may finish
            msgs = await client.messages("st")
            return any(
                m.get("messageId") == second.id and m["role"] in ("assistant", "error")
                for m in msgs  # the live progress bubble has no message id
            )

        await wait_until(second_answered, 30, "the second message to be answered")
        msgs = await client.messages("st")
        outcome = [
            (m["role"], m["text"])
            for m in msgs
            if m["messageId"] == second.id and m["role"] != "user"
        ]
        stop_answer = [m["text"] for m in msgs if m["messageId"] == stop.id and m["role"] != "user"]
        assert [role for role, _ in outcome] == ["assistant"], (
            f"the message queued behind the interrupted run was not run: {outcome}; "
            f"the requeued /stop answered {stop_answer}"
        )
