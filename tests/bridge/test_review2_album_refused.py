"""An album refused whole (over the queue limit) before a crash has its remaining parts run
as a turn after the restart.

The live gateway answers an album's first part "not queued, send it again" and closes the
album's later parts silently (``Engine._closed_albums``, in memory only). A crash after the
refusal was written and before a later part was closed (accepted, not yet ``merged``)
leaves that part ``accepted``; the restarted gateway has forgotten the refusal and runs the
part on its own: the person, told to send the album again, gets an answer to a fragment
of it (and the fragment runs a second time when they resend). The engine's album logic
is platform-neutral (Telegram is the platform that sends parts); the web chat is used here
only to read the transcript.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway, wait_until

from bridge.model import Inbound, InboxState, Outgoing, ReplyKind, ReplyTarget
from bridge.store import NewReply, SqliteStore
from provisioning import naming


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def _part(event_id: str, text: str) -> Inbound:
    return Inbound(
        platform="web",
        event_id=event_id,
        thread_key="web:al",
        sender_id="ada",
        sender_name="ada",
        text=text,
        target={"thread": "al"},
        part_of="album-1",
    )


async def test_the_rest_of_an_album_refused_before_a_crash_is_not_run(env: dict[str, str]) -> None:
    async with running_gateway(env):  # creates the root and the database
        pass
    db = Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"
    home = naming.home_name("web:al")
    store = SqliteStore(db)
    await store.open()
    try:
        first, _ = await store.accept(
            _part("p1", "caption of the album"), home=home, is_command=False
        )
        second, _ = await store.accept(_part("p2", "second photo"), home=home, is_command=False)
        # the live gateway refused the album at its first part (the queue was full) ...
        refusal = NewReply(
            f"overflow:{first.id}",
            first.conversation_id,
            Outgoing(ReplyKind.NOTICE, "⏸️ ... This one was not queued: send it again ..."),
            ReplyTarget(surface="web", thread_key="web:al", context={"thread": "al"}),
            first.id,
        )
        await store.complete_message(first.id, InboxState.FAILED, [refusal])
        # ... and was killed before it closed the second part (still accepted)
    finally:
        await store.close()

    async with running_gateway(env) as (app, client):
        assert app.store is not None

        async def second_settled() -> bool:
            msg = await app.store.get_message(second.id)  # type: ignore[union-attr]
            return (
                msg is not None
                and msg.state is not InboxState.ACCEPTED
                and (msg.state is not InboxState.RUNNING)
            )

        await wait_until(second_settled, 20, "the album's second part to be dealt with")
        settled = await app.store.get_message(second.id)
        ran = [s["prompt"] for s in client.starts("web:al")]
        assert ran == [], f"a part of an album refused whole ran after the restart: {ran}"
        assert settled is not None and settled.state is InboxState.MERGED, settled
