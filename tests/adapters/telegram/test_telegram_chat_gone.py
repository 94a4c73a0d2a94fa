"""A chat that blocked the bot: what it still had queued is not run, and it is heard again
once it writes again.

A person who blocks the bot (or a group that removes it) while messages wait in line would
otherwise have each one run (paid for) and its answer refused (403) one by one.
"""

from __future__ import annotations

from pathlib import Path

from gateway_harness import install_fake_runner
from tg_support import (
    ADA,
    GRACE,
    FakeBotApi,
    post,
    private_chat,
    running_gateway,
    sample,
    sent_to,
    update,
    wait_sent,
    wait_until,
)

from bridge.model import InboxState


def use_fake_runner(env: dict[str, str], fake_dir: Path) -> None:
    """The tests' own runner (it holds a run on ``hold NAME`` until released)."""
    env.update(install_fake_runner(fake_dir))


async def test_a_chat_that_blocked_the_bot_has_its_queued_messages_dropped_until_it_writes(
    env: dict[str, str], fake_dir: Path, fake: FakeBotApi
) -> None:
    use_fake_runner(env, fake_dir)
    # the answer to the first message is refused: Ada blocked the bot meanwhile
    fake.fail_next("sendMessage", "forbidden", when=lambda p: "to: hold one" in p["text"])
    async with running_gateway(env) as (app, client):
        assert await post(app.port, update(740000001, private_chat(ADA), ADA, "hold one")) == 200
        await wait_until(lambda: len(client.starts()) == 1, 20, "the first run")
        for i, text in enumerate(("second", "third"), start=2):
            assert await post(app.port, update(740000000 + i, private_chat(ADA), ADA, text)) == 200
        await wait_sent(fake, ADA, "Queued")
        # Grace's chat is not Ada's: hers runs whatever Ada did
        assert await post(app.port, update(740000010, private_chat(GRACE), GRACE, "hi")) == 200
        await wait_sent(fake, GRACE, "to: hi")
        client.release("one")

        async def failed() -> int:
            return len(await app.store.messages_in_state(InboxState.FAILED))

        await wait_until(lambda: failed(), 20, "Ada's queued messages closed")
        labels = {"platform": "telegram", "outcome": "unreachable"}
        await wait_until(
            lambda: sample(app, "jazz_bridge_messages_total", **labels) == 2,
            20,
            "two messages counted as unreachable",
        )
        closed = await app.store.messages_in_state(InboxState.FAILED)
        assert sorted(m.text for m in closed) == ["second", "third"]
        prompts = [r["prompt"] for r in client.starts()]
        assert "second" not in prompts and "third" not in prompts  # never run
        # their "not run" replies were recorded but never tried on the platform
        assert not [c for c in sent_to(fake, ADA) if "Not run" in c.params["text"]]
        refused = [c for c in fake.called("sendMessage", ok=False) if c.status == 403]
        assert len(refused) == 1

        # Ada unblocks the bot and writes: she is answered again
        assert await post(app.port, update(740000020, private_chat(ADA), ADA, "back")) == 200
        await wait_sent(fake, ADA, "to: back")
