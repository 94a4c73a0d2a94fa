"""A button press does not hold up everyone's messages while its message is edited.

In polling mode a press is handled between the messages of its ``getUpdates`` batch, and
the edit of the pressed message (paced seconds apart in a group, slow when Telegram is)
was awaited there: every chat's next messages waited for it, up to the client's 5 s
timeout per press when Telegram was slow to answer an edit. The press is still answered
at once; the edit now goes on beside the intake.

The real gateway and PTB client against the fake Bot API (polling); every wait bounded.
"""

from __future__ import annotations

import pytest
from tg_support import (
    ADA,
    GRACE,
    GROUP_CHAT,
    FakeBotApi,
    press,
    private_chat,
    running_gateway,
    stored,
    update,
    wait_sent,
    wait_until,
)

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
READ_TIMEOUT_S = 5.0  # the adapter transport's read timeout (PTB's default)
OLD_STOP = "AAAAAAAAAAAAAAAA.stop"  # a bubble's Stop from before a restart: settled by an edit


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    del env["JAZZ_BRIDGE_TELEGRAM__WEBHOOK_URL"]
    env["JAZZ_BRIDGE_TELEGRAM__POLL_TIMEOUT_S"] = "1"
    return env


async def test_a_press_whose_edit_is_slow_leaves_the_next_message_taken_at_once(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env) as (app, _client):
        await wait_until(lambda: bool(fake.called("getUpdates")), 15, "polling started")
        # Telegram is slow to answer the edit: the client gives up after its read timeout
        fake.fail("editMessageText", "stall", stall_s=READ_TIMEOUT_S + 1)
        (stall,) = fake.faults
        # one batch: a press in the group, then Grace's message in her private chat
        fake.queue_update(press(741500001, ADA, GROUP_CHAT, OLD_STOP, message_id=4321))
        fake.queue_update(update(741500002, private_chat(GRACE), GRACE, "hello"))
        await wait_until(lambda: stall.times == 0, 10, "the pressed message's edit under way")
        (told,) = fake.called("answerCallbackQuery")
        assert "ended" in told.params["text"]

        async def taken() -> bool:
            return await stored(app) >= 1

        # taken well within the stalled edit's timeout (before: only once the edit gave up)
        await wait_until(taken, READ_TIMEOUT_S - 2, "Grace's message stored")
        await wait_sent(fake, GRACE, "hello")
    # the stop waited for the edit still under way (bounded), and then closed cleanly
