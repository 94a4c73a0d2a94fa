"""Slack's definite refusals of a post, through the real deliverer, SQLite store, SlackSurface
and AsyncWebClient against the fake Slack Web API (adapters/slack/surface.py; every wait
bounded).

An error code Slack never changes its mind about (an announcement-only channel, a thread
that takes no replies, an expired token) gives the reply up at once instead of retrying it
for the hour of patience that holds the conversation's later replies. A channel that takes
no more of the bot's posts (archived, deleted, the bot removed) is a ``ChatGone``: the core
is told once (it drops what the channel still had queued), the conversation's later
replies are given up without calling Slack again, and it is posted to again once the
channel writes again."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fake_slack_api import FakeSlackApi
from slack_support import APP_TOKEN, BOT_TOKEN, CHANNEL, TEAM, shorten_pauses, slack_surface

from bridge.engine.delivery import Deliverer
from bridge.metrics import Metrics
from bridge.model import Inbound, Outgoing, ReplyKind, ReplyState, ReplyTarget
from bridge.store import NewReply, ReplyRecord, SqliteStore

THREAD_TS = "1764669600.000100"
KEY = f"slack:{TEAM}:{CHANNEL}:{THREAD_TS}"


class RefusingSlack(FakeSlackApi):
    """Slack refusing every chat.postMessage with one error code (HTTP 200, ok: false)."""

    def __init__(self, code: str) -> None:
        super().__init__(BOT_TOKEN, app_token=APP_TOKEN)
        self.code = code

    def _m_chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": False, "error": self.code}


@pytest.mark.parametrize(
    "code",
    ["restricted_action_read_only_channel", "cannot_reply_to_message", "token_expired"],
)
async def test_a_post_slack_refuses_for_good_is_given_up_not_retried_for_an_hour(
    store: SqliteStore, code: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    shorten_pauses(monkeypatch)
    fake = RefusingSlack(code)
    await fake.start()
    try:
        async with slack_surface(fake) as surface:
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
        await fake.stop()


class ClosingSlack(FakeSlackApi):
    """Slack refusing every post with ``code`` while ``gone`` holds."""

    def __init__(self, code: str) -> None:
        super().__init__(BOT_TOKEN, app_token=APP_TOKEN)
        self.code = code
        self.gone = True

    def _m_chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        if self.gone:
            return {"ok": False, "error": self.code}
        return super()._m_chat_postMessage(args)


async def reply(store: SqliteStore, n: int) -> ReplyRecord:
    msg, _ = await store.accept(
        Inbound(platform="slack", event_id=f"Ev{n}", thread_key=KEY, sender_id="U1", text="hi"),
        home="slack-home",
        is_command=False,
    )
    target = ReplyTarget(
        surface="slack",
        thread_key=KEY,
        context={"team": TEAM, "channel": CHANNEL, "thread_ts": THREAD_TS},
    )
    (rec,) = await store.add_replies(
        [
            NewReply(
                f"answer:{msg.id}:0",
                msg.conversation_id,
                Outgoing(ReplyKind.ANSWER, f"answer {n}"),
                target,
                message_id=msg.id,
            )
        ]
    )
    return rec


async def bounded(coro: Any) -> Any:
    return await asyncio.wait_for(coro, timeout=10)


@pytest.mark.parametrize("code", ["is_archived", "channel_not_found", "not_in_channel"])
async def test_a_channel_gone_is_told_once_and_not_called_again_until_it_writes(
    store: SqliteStore, code: str
) -> None:
    fake = ClosingSlack(code)
    await fake.start()
    try:
        async with slack_surface(fake) as surface:
            told: list[tuple[int, str]] = []
            deliverer = Deliverer(
                store,
                {"slack": surface},
                Metrics(),
                lambda _: None,
                on_gone=lambda cid, why: told.append((cid, why)),
            )
            try:
                first, second = await reply(store, 1), await reply(store, 2)
                missed = await bounded(deliverer.deliver([first, second]))
                assert missed == {first.id, second.id}
                refused = fake.called("chat.postMessage", ok=False)
                assert len(refused) == 1  # the second was not tried: it would be refused too
                assert len(told) == 1 and told[0][0] == first.conversation_id
                assert code in told[0][1]
                for rec in (first, second):
                    got = await store.get_reply(rec.id)
                    assert got is not None and got.state is ReplyState.FAILED

                # the channel wrote again (unarchived, the bot invited back)
                fake.gone = False
                deliverer.reachable(first.conversation_id)
                third = await reply(store, 3)
                assert await bounded(deliverer.deliver([third])) == set()
                posted = fake.called("chat.postMessage")
                assert [c.args.get("text") or c.args.get("markdown_text") for c in posted] == [
                    "answer 3"
                ]
            finally:
                deliverer.closing = True
    finally:
        await fake.stop()
