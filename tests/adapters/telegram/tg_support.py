"""What the Telegram test modules share: ids, the gateway's environment (webhook or polling),
updates as Telegram sends them, webhook posts, what the fake saw, waits.

The fixtures on top of these (``fake``, ``env``, ``surface``) are in this directory's
``conftest.py``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from telegram import Bot

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_bot_api import Call, FakeBotApi
from gateway_harness import (
    FAKE_RUNNER,
    Client,
    gateway_env,
    running_gateway,
    use_reference_runner,
    wait_until,
)

from adapters.telegram.surface import TelegramSurface
from adapters.telegram.transport import AiohttpRequest
from bridge.model import InboxState

__all__ = [
    "FAKE_RUNNER",
    "Call",
    "Client",
    "FakeBotApi",
    "running_gateway",
    "use_reference_runner",
    "wait_until",
]

VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "telegram"
TOKEN = "999999999:AAtest-token_for-the-fake"
SECRET = "s3cret-webhook_token"
BOT = 999999999
BOT_NAME = "jazz_example_bot"
ADA, GRACE = 111111111, 222222222
GROUP = -1001234567890
FORUM = -1009876543210
GROUP_CHAT = {"id": GROUP, "title": "Ops", "type": "supergroup"}
FORUM_CHAT = {"id": FORUM, "title": "Team", "type": "supergroup", "is_forum": True}
NOT_AN_AI = "reference runner, not an AI"  # in every answer of the reference runner


def private_chat(user: int) -> dict[str, Any]:
    return {"id": user, "type": "private", "first_name": "Grace" if user == GRACE else "Ada"}


def vector(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((VECTORS / f"{name}.json").read_text())
    return data


def telegram_env(
    root: Path, fake_dir: Path, uid_range: tuple[int, int], fake: FakeBotApi, **extra: str
) -> dict[str, str]:
    """The gateway in webhook mode against ``fake``, everyone allowed, the reference runner."""
    env = gateway_env(
        root,
        fake_dir,
        uid_range,
        JAZZ_BRIDGE_TELEGRAM__TOKEN=TOKEN,
        JAZZ_BRIDGE_TELEGRAM__API_URL=fake.api_url,
        JAZZ_BRIDGE_TELEGRAM__WEBHOOK_URL="https://bridge.example/telegram/webhook",
        JAZZ_BRIDGE_TELEGRAM__WEBHOOK_SECRET=SECRET,
        JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE="true",
        JAZZ_BRIDGE_TELEGRAM__MIN_SEND_INTERVAL_S="0.05",
    )
    use_reference_runner(env, fake_dir)
    env.update(extra)
    return env


def polling(env: dict[str, str]) -> dict[str, str]:
    """``env`` (the gateway's environment, changed in place) in polling mode: no webhook URL."""
    del env["JAZZ_BRIDGE_TELEGRAM__WEBHOOK_URL"]
    env["JAZZ_BRIDGE_TELEGRAM__POLL_TIMEOUT_S"] = "1"
    return env


async def post(port: int, body: Any, secret: str | None = SECRET, raw: bytes | None = None) -> int:
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers["X-Telegram-Bot-Api-Secret-Token"] = secret
    data = raw if raw is not None else json.dumps(body).encode()
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"http://127.0.0.1:{port}/telegram/webhook", data=data, headers=headers) as r,
    ):
        return r.status


def sent_to(fake: FakeBotApi, chat: int, method: str = "sendMessage") -> list[Call]:
    return [c for c in fake.called(method) if int(c.params["chat_id"]) == chat]


def to_chat(fake: FakeBotApi, chat: int) -> list[Call]:
    """Every call the fake got for ``chat``, whatever its method."""
    return [c for c in fake.calls if str(c.params.get("chat_id")) == str(chat)]


def seen(fake: FakeBotApi) -> list[tuple[str, int, str]]:
    return [(c.method, c.status, str(c.params.get("text", ""))[:60]) for c in fake.calls]


async def wait_sent(
    fake: FakeBotApi, chat: int, contains: str, count: int = 1, timeout: float = 30
) -> list[Call]:
    found: list[Call] = []

    def check() -> bool:
        nonlocal found
        found = [c for c in sent_to(fake, chat) if contains in c.params.get("text", "")]
        return len(found) >= count

    try:
        await wait_until(check, timeout, f"{count} sendMessage to {chat} with {contains!r}")
    except AssertionError as exc:  # say what the fake saw
        raise AssertionError(f"{exc}; the fake Bot API saw {seen(fake)}") from None
    return found


def texts(fake: FakeBotApi, chat: int, contains: str = "") -> list[str]:
    return [str(c.params["text"]) for c in sent_to(fake, chat) if contains in c.params["text"]]


def sample(app: Any, name: str, **labels: str) -> float:
    value = app.metrics.registry.get_sample_value(name, labels)
    return float(value or 0.0)


async def stored(app: Any) -> int:
    """Messages in the inbox, whatever their state, counted by id (a message moving on
    between two reads, read in the states' order, is seen at least once, never twice)."""
    ids = {m.id for state in InboxState for m in await app.store.messages_in_state(state)}
    return len(ids)


# a poll as a Bot API server before 9.6 sends it (no persistent_id: PTB 22 refuses to build it)
OLD_SERVER_POLL: dict[str, Any] = {
    "id": "p1",
    "question": "Lunch where?",
    "options": [{"text": "Thai", "voter_count": 0}],
    "total_voter_count": 0,
    "is_closed": False,
    "is_anonymous": True,
    "type": "regular",
    "allows_multiple_answers": False,
}


def update(update_id: int, chat: dict[str, Any], user: int, text: str, **extra: Any) -> dict:
    msg = {
        "message_id": update_id % 100000,
        "from": {"id": user, "is_bot": False, "first_name": "Grace" if user == GRACE else "Ada"},
        "chat": chat,
        "date": 1764669660,
        "text": text,
        **extra,
    }
    return {"update_id": update_id, "message": msg}


def mention(update_id: int, chat: dict[str, Any], user: int, text: str, **extra: Any) -> dict:
    """``@jazz_example_bot <text>`` with its mention entity, as Telegram sends it."""
    entities = [{"offset": 0, "length": len(BOT_NAME) + 1, "type": "mention"}]
    return update(update_id, chat, user, f"@{BOT_NAME} {text}", entities=entities, **extra)


def press(
    update_id: int, user: int, chat: dict[str, Any], data: str, message_id: int = 7777
) -> dict[str, Any]:
    """A callback query: ``user`` pressed a button carrying ``data`` under ``message_id``."""
    return {
        "update_id": update_id,
        "callback_query": {
            "id": f"cq{update_id}",
            "from": {"id": user, "is_bot": False, "first_name": "X"},
            "message": {"message_id": message_id, "chat": chat, "date": 1764669800, "text": "?"},
            "chat_instance": "1",
            "data": data,
        },
    }


def buttons(call: Call) -> dict[str, str]:
    """A sent message's inline keyboard as label -> callback_data."""
    rows = call.params["reply_markup"]["inline_keyboard"]
    return {b["text"]: b["callback_data"] for row in rows for b in row}


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@asynccontextmanager
async def surface_on(fake: FakeBotApi) -> AsyncIterator[TelegramSurface]:
    """The Telegram surface on the real python-telegram-bot client, pointed at ``fake``
    (its token, and its file server for downloads), closed at the end."""
    bot = Bot(
        fake.token,
        base_url=fake.api_url,
        base_file_url=f"http://127.0.0.1:{fake.port}/file/bot",
        request=AiohttpRequest(pool_size=4),
        get_updates_request=AiohttpRequest(pool_size=1),
    )
    await bot.initialize()
    surface = TelegramSurface(bot, min_interval_s=0.0)
    try:
        yield surface
    finally:
        await surface.close()
        await bot.shutdown()
