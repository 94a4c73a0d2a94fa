"""What Telegram long polling takes, through the real gateway and PTB client against the fake
Bot API: the updates it fetched are run once, the offset they move is stored (paced, the
last one at stop) and a restart goes on from it; and one update python-telegram-bot cannot
build (a poll from a Bot API server older than 9.6) is passed by, logged and counted, not
the end of polling. (Polling stopped or killed between fetch and acknowledgement, with the
tests' own runner: test_telegram_polling.py.)"""

from __future__ import annotations

import contextlib
import copy
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from tg_support import (
    ADA,
    BOT,
    OLD_SERVER_POLL,
    FakeBotApi,
    polling,
    private_chat,
    running_gateway,
    sample,
    sent_to,
    update,
    vector,
    wait_sent,
    wait_until,
)

# PTB 22 itself warns when it builds a RetryAfter (its type becomes timedelta in v23)
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


async def test_polling_runs_updates_and_persists_the_offset(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    polling(env)
    fake.queue_update(vector("private_message"))
    async with running_gateway(env) as (app, _client):
        await wait_sent(fake, ADA, "calendar")
        key = f"telegram:{BOT}:offset"

        async def persisted() -> bool:
            return await app.store.get_kv(key) == "730000002"

        await wait_until(persisted, 10, "the offset persisted")
        assert fake.called("deleteWebhook") and not fake.called("setWebhook")
        fake.queue_update(vector("private_message"))  # redelivered after a lost ack
        await wait_until(lambda: len(fake.called("getUpdates")) >= 3, 10, "polled again")
        assert len([c for c in sent_to(fake, ADA) if "calendar" in c.params["text"]]) == 1
        # the stored offset is a paced restart hint (one write, then at most one a second):
        # the second of two quick updates is stored by stop(), not lost with the pace
        for n, text in ((7, "and the weather?"), (8, "and the tides?")):
            later = copy.deepcopy(vector("private_message"))
            later["update_id"] = 730000000 + n
            later["message"]["message_id"] += n
            later["message"]["text"] = text
            fake.queue_update(later)
            await wait_sent(fake, ADA, text.split()[-1])  # its batch is done, the offset due
    db = Path(env["JAZZ_BRIDGE_ROOT"]) / "state" / "bridge.db"
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        (stored,) = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
    assert stored == "730000009"
    # a restart goes on from the stored offset
    polls = len(fake.called("getUpdates"))
    async with running_gateway(env) as (app, _client):
        await wait_until(lambda: len(fake.called("getUpdates")) > polls, 10, "polled after restart")
        assert fake.called("getUpdates")[polls].params.get("offset") == 730000009


def old_server_poll(update_id: int) -> dict[str, Any]:
    """A poll as a Bot API server before 9.6 sends it (PTB 22 refuses to build it)."""
    message = {
        "message_id": 77,
        "from": {"id": ADA, "is_bot": False, "first_name": "Ada"},
        "chat": private_chat(ADA),
        "date": 1764669660,
        "poll": copy.deepcopy(OLD_SERVER_POLL),
    }
    return {"update_id": update_id, "message": message}


async def test_a_polled_update_ptb_cannot_build_does_not_stop_polling(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    polling(env)
    fake.queue_update(old_server_poll(730009700))
    fake.queue_update(update(730009701, private_chat(ADA), ADA, "still there?"))
    async with running_gateway(env) as (app, _client):
        await wait_sent(fake, ADA, "still there?", timeout=15)
        (telegram,) = [a for a in app.adapters if a.name == "telegram"]
        assert telegram.health() is None
        assert sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="malformed")
