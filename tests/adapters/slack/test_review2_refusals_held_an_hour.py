"""Slack's definite refusals must not hold a conversation's replies for an hour.

Delivery now retries a *transient* failure until the reply is an hour old (PATIENCE_S),
every SLOW_BACKOFF_S, and the conversation's later replies wait behind it. The Slack
surface calls a failure permanent only when its error code is in PERMANENT_ERRORS (or the
HTTP status is a 4xx); every other ``ok: false`` Slack answers with HTTP 200 is taken as
transient. Slack answers many such codes for a post that can never succeed, e.g.
``restricted_action_read_only_channel`` (an announcement-only channel: anyone may mention
the bot there, only admins may post), ``cannot_reply_to_message``, ``token_expired`` (a
rotating token nobody refreshed). Each now blocks the thread's replies for an hour (it
was six quick tries, ~30 s, before), on an error Slack never changes its mind about.

The real deliverer, SQLite store, SlackSurface and AsyncWebClient, against the fake Slack
Web API answering the post with that refusal; the deliverer's pauses are shortened, its
patience is not (the point), and the wait for the outcome is bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from fake_slack_api import FakeSlackApi
from slack_sdk.web.async_client import AsyncWebClient
from slack_support import APP_TOKEN, BOT_TOKEN

from adapters.slack.surface import SlackSurface
from bridge.engine import delivery
from bridge.engine.delivery import Deliverer
from bridge.metrics import Metrics
from bridge.model import Inbound, Outgoing, ReplyKind, ReplyState, ReplyTarget
from bridge.store import NewReply, SqliteStore

CHANNEL, THREAD_TS, TEAM = "C0CHAN0001", "1764669600.000100", "T0TEAM0001"


class RefusingSlack(FakeSlackApi):
    """Slack refusing every chat.postMessage with one error code (HTTP 200, ok: false)."""

    def __init__(self, code: str) -> None:
        super().__init__(BOT_TOKEN, app_token=APP_TOKEN)
        self.code = code

    def _m_chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": False, "error": self.code}


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery, "MAX_BACKOFF_S", 0.001)
    monkeypatch.setattr(delivery, "SLOW_BACKOFF_S", 0.01)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "bridge.db")
    await s.open()
    yield s
    await s.close()


@pytest.mark.parametrize(
    "code",
    ["restricted_action_read_only_channel", "cannot_reply_to_message", "token_expired"],
)
async def test_a_post_slack_refuses_for_good_is_given_up_not_retried_for_an_hour(
    store: SqliteStore, code: str
) -> None:
    fake = RefusingSlack(code)
    await fake.start()
    try:
        client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url, retry_handlers=[])
        async with aiohttp.ClientSession() as session:
            client.session = session
            surface = SlackSurface(client, BOT_TOKEN, api_url=fake.api_url, max_file_bytes=1024)
            try:
                key = f"slack:{TEAM}:{CHANNEL}:{THREAD_TS}"
                msg, _ = await store.accept(
                    Inbound(
                        platform="slack", event_id="Ev1", thread_key=key, sender_id="U1", text="hi"
                    ),
                    home="slack-home",
                    is_command=False,
                )
                target = ReplyTarget(
                    surface="slack",
                    thread_key=key,
                    context={"team": TEAM, "channel": CHANNEL, "thread_ts": THREAD_TS},
                )
                (rec,) = await store.add_replies(
                    [
                        NewReply(
                            f"answer:{msg.id}:0",
                            msg.conversation_id,
                            Outgoing(ReplyKind.ANSWER, "the answer"),
                            target,
                        )
                    ]
                )
                deliverer = Deliverer(store, {"slack": surface}, Metrics(), lambda _: None)
                task = asyncio.ensure_future(deliverer.deliver([rec]))
                done, _ = await asyncio.wait({task}, timeout=10)
                deliverer.closing = True
                if not done:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                posts = len(fake.called("chat.postMessage", ok=False)) + len(
                    fake.called("chat.postMessage")
                )
                assert done, (
                    f"Slack refused the post with {code!r} (it never will post it), yet after "
                    f"{posts} tries in 10 s the reply is still being retried, holding the "
                    "thread's later replies for up to an hour"
                )
                failed = await store.get_reply(rec.id)
                assert failed is not None and failed.state is ReplyState.FAILED
            finally:
                await surface.close()
    finally:
        await fake.stop()
