"""Review: one polled update that python-telegram-bot cannot read stopped polling for good.

``getUpdates`` is parsed by PTB as a whole batch. An update it refuses to build raised a
``TypeError`` (not a ``TelegramError``) out of ``get_updates``: the poll loop ended with
"telegram: polling stopped", /healthz said so, and nothing anyone sent was read again until
a restart, after which the same update, never passed, stopped it again. A real case: a
poll forwarded to the bot through a self-hosted Bot API server older than 9.6 (its options
have no ``persistent_id``, which PTB 22 requires). The webhook answers such an update 400;
polling now passes it by (logged and counted) and reads the messages behind it.
"""

from __future__ import annotations

from typing import Any

import pytest
from tg_support import (
    ADA,
    FakeBotApi,
    private_chat,
    running_gateway,
    sample,
    update,
    wait_sent,
)

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    """The package's environment (conftest.py) in polling mode: no webhook URL."""
    del env["JAZZ_BRIDGE_TELEGRAM__WEBHOOK_URL"]
    env["JAZZ_BRIDGE_TELEGRAM__POLL_TIMEOUT_S"] = "1"
    return env


def old_server_poll(update_id: int) -> dict[str, Any]:
    """A poll as a Bot API server before 9.6 sends it (PTB 22 refuses to build it)."""
    message = {
        "message_id": 77,
        "from": {"id": ADA, "is_bot": False, "first_name": "Ada"},
        "chat": private_chat(ADA),
        "date": 1764669660,
        "poll": {
            "id": "p1",
            "question": "Lunch where?",
            "options": [{"text": "Thai", "voter_count": 0}],
            "total_voter_count": 0,
            "is_closed": False,
            "is_anonymous": True,
            "type": "regular",
            "allows_multiple_answers": False,
        },
    }
    return {"update_id": update_id, "message": message}


async def test_a_polled_update_ptb_cannot_build_does_not_stop_polling(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    fake.queue_update(old_server_poll(730009700))
    fake.queue_update(update(730009701, private_chat(ADA), ADA, "still there?"))
    async with running_gateway(env) as (app, _client):
        await wait_sent(fake, ADA, "still there?", timeout=15)
        (telegram,) = [a for a in app.adapters if a.name == "telegram"]
        assert telegram.health() is None
        assert sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="malformed")
