"""Slack events into the gateway's turns (adapters/slack/adapter.py): the real gateway, real
bolt and the real AsyncWebClient against a fake Slack Web API, every request signed like
Slack signs it (built from the platform vectors).

An event is stored before Slack gets its 200 and run once however often Slack delivers it; a
DM is a conversation of its own (a DM that mentions the bot comes twice: one message), bots'
own messages and edits are not turns, the words of a message with only rich-text blocks
and of a forwarded message reach the agent, and Socket Mode takes the same events."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway, wait_until
from slack_support import (
    APP_TOKEN,
    BOT,
    CHANNEL,
    DM,
    GRACE,
    MENTION_TS,
    TEAM,
    event,
    health,
    mention,
    message,
    posts,
    sample,
    stored,
    vector,
    wait_post,
)

from bridge.errors import AdapterError
from bridge.model import InboxState


async def test_a_retry_storm_runs_each_event_once_and_replies_in_the_thread(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        first = vector("app_mention")
        assert await event(app.port, first) == 200
        assert await stored(app) == 1  # persisted before Slack got its 200
        for retry in range(1, 4):  # three redeliveries of the same event_id
            assert await event(app.port, first, retry) == 200
        (answer,) = await wait_post(fake, "summarize yesterday")
        assert answer.args["thread_ts"] == MENTION_TS  # the mention's own ts starts the thread
        assert answer.args["channel"] == CHANNEL
        assert "<@U0BOT00001>" not in answer.args["markdown_text"]
        assert "text" not in answer.args and "blocks" not in answer.args
        assert answer.args["metadata"]["event_type"] == "jazz_bridge_reply"
        dup = sample(app, "jazz_bridge_messages_total", platform="slack", outcome="duplicate")
        assert dup == 3
        # a reply in the thread without a mention continues the same conversation
        reply = vector("thread_reply")
        for retry in range(4):
            assert await event(app.port, reply, retry) == 200
        (second,) = await wait_post(fake, "follow-ups with owners")
        assert second.args["thread_ts"] == MENTION_TS
        assert "Earlier turns in this conversation: 1" in second.args["markdown_text"]
        await wait_until(
            lambda: sample(app, "jazz_bridge_runs_total", outcome="ok") == 2, 20, "two runs"
        )
        key = f"slack:{TEAM}:{CHANNEL}:{MENTION_TS}"
        conv = await app.store.conversation_by_key(key)
        assert conv is not None
        done = await app.store.messages_in_state(InboxState.DONE)
        assert {m.thread_key for m in done} == {key} and len(done) == 2
        assert len(posts(fake, "summarize yesterday")) == 1
        assert len(posts(fake, "follow-ups with owners")) == 1
        # the Web API calls share kept-alive connections (no new TLS handshake per call)
        answered = [c for c in fake.calls if c.status == 200 and c.peer is not None]
        assert len(answered) >= 3
        assert len({c.peer for c in answered}) < len(answered), [c.peer for c in answered]
        # a plain message in a thread the bot is not part of is not a turn
        other = message("Ev0OTHER", "just humans", ts="1764669700.000100", thread_ts="17.0")
        assert await event(app.port, other) == 200
        assert await stored(app) == 2
        # a stopping gateway refuses (no 2xx), so Slack delivers the event again later
        assert app.engine is not None
        app.engine.stopping = True
        late = mention("Ev0LATE", "too late", ts="1764669800.000100")
        assert await event(app.port, late) == 503
        assert await stored(app) == 2


async def test_a_dm_is_its_own_conversation_and_bots_and_edits_are_ignored(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        assert await event(app.port, vector("bot_message_ignored")) == 200
        edited = message("Ev0EDIT", "", ts="1764670001.000100", channel=DM)
        edited["event"].update(subtype="message_changed", message={"text": "edited"})
        assert await event(app.port, edited) == 200
        deleted = message("Ev0DEL", "", ts="1764670002.000100", channel=DM)
        deleted["event"].update(subtype="message_deleted", deleted_ts="1764670000.000300")
        assert await event(app.port, deleted) == 200
        own = message("Ev0OWN", "my own answer", user=BOT, ts="1764670003.000100", channel=DM)
        assert await event(app.port, own) == 200
        assert await stored(app) == 0
        assert sample(app, "jazz_bridge_messages_total", platform="slack", outcome="ignored") >= 3

        assert await event(app.port, vector("direct_message")) == 200
        (answer,) = await wait_post(fake, "deploy config since Monday", channel=DM)
        assert "thread_ts" not in answer.args  # a DM is answered in the DM
        later = message("Ev0DM2", "and since Tuesday?", ts="1764670100.000100", channel=DM)
        assert await event(app.port, later) == 200
        (second,) = await wait_post(fake, "since Tuesday", channel=DM)
        assert "Earlier turns in this conversation: 1" in second.args["markdown_text"]
        # a thread inside the DM is a conversation of its own, answered in that thread
        threaded = message(
            "Ev0DM3", "in a DM thread", ts="1764670200.000100", channel=DM, thread_ts="17.5"
        )
        assert await event(app.port, threaded) == 200
        (third,) = await wait_post(fake, "in a DM thread", channel=DM)
        assert third.args["thread_ts"] == "17.5"
        assert "Earlier turns in this conversation: 0" in third.args["markdown_text"]
        # a DM that mentions the bot comes twice, as message.im and as app_mention, each with
        # an event id of its own: one message (channel and ts name it), one run
        assert await stored(app) == 3
        both = "1764670300.000100"
        as_message = message("Ev0DMM", f"<@{BOT}> announced twice", ts=both, channel=DM)
        as_mention = mention("Ev0DMA", "announced twice", ts=both, channel=DM, channel_type="im")
        assert await event(app.port, as_mention) == 200
        assert await event(app.port, as_message) == 200
        assert await stored(app) == 4
        await wait_post(fake, "announced twice", channel=DM)
        keys = {m.thread_key for m in await app.store.messages_in_state(InboxState.DONE)}
        assert keys == {f"slack:{TEAM}:{DM}", f"slack:{TEAM}:{DM}:17.5"}


async def test_a_dm_mention_taken_first_continues_the_dm(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        first = message("Ev0DMMEN1", "hello there", ts="1764681000.000100", channel=DM)
        assert await event(app.port, first) == 200
        await wait_post(fake, "hello there", channel=DM)
        ts = "1764681010.000100"
        assert await event(app.port, mention("Ev0DMMEN2", "and again", ts=ts, channel=DM)) == 200
        (answer,) = await wait_post(fake, "and again", channel=DM)
        assert "thread_ts" not in answer.args, answer.args  # in the DM, not a thread
        twin = message("Ev0DMMEN3", "<@U0BOT00001> and again", ts=ts, channel=DM)
        assert await event(app.port, twin) == 200  # the same message: not run twice
        stored: list[Any] = []
        for state in InboxState:
            stored += await app.store.messages_in_state(state)
        assert {m.thread_key for m in stored} == {f"slack:{TEAM}:{DM}"}
        assert len(stored) == 2, [m.text for m in stored]


def rich(*elements: dict[str, Any]) -> list[dict[str, Any]]:
    section = {"type": "rich_text_section", "elements": list(elements)}
    return [{"type": "rich_text", "block_id": "b1", "elements": [section]}]


async def test_a_dm_with_only_blocks_is_run(env: dict[str, str], fake: FakeSlackApi) -> None:
    async with running_gateway(env) as (app, _client):
        body = message("Ev0BLK1", "", ts="1764683000.000100", channel=DM)
        body["event"]["blocks"] = rich(
            {"type": "text", "text": "compare a<b & c with "},
            {"type": "user", "user_id": GRACE},
        )
        assert await event(app.port, body) == 200
        (answer,) = await wait_post(fake, "compare a<b & c with", channel=DM, timeout=15)
        assert f"<@{GRACE}>" in answer.args["markdown_text"]
        assert not posts(fake, "`!new`", channel=DM), "answered with the help text"


async def test_a_mention_with_only_blocks_loses_the_bots_mention(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        body = mention("Ev0BLK2", "", ts="1764683100.000100")
        body["event"]["text"] = ""
        body["event"]["blocks"] = rich(
            {"type": "user", "user_id": BOT}, {"type": "text", "text": " list the open incidents"}
        )
        assert await event(app.port, body) == 200
        (answer,) = await wait_post(fake, "list the open incidents", timeout=15)
        assert f"<@{BOT}>" not in answer.args["markdown_text"]


def shared(text: str) -> dict[str, Any]:
    """The attachment Slack adds for a forwarded message (its real field layout)."""
    return {
        "ts": "1764600000.000100",
        "channel_id": CHANNEL,
        "channel_team": "T0TEAM0001",
        "is_msg_unfurl": True,
        "is_share": True,
        "id": 1,
        "original_url": f"https://acme.slack.com/archives/{CHANNEL}/p1764600000000100",
        "fallback": f"[December 1st, 2025 2:40 PM] grace: {text}",
        "text": text,
        "author_id": GRACE,
        "author_subname": "Grace",
        "author_name": "Grace",
        "mrkdwn_in": ["text"],
        "color": "D0D0D0",
        "from_url": f"https://acme.slack.com/archives/{CHANNEL}/p1764600000000100",
        "footer": "Posted in #incidents",
    }


async def test_a_forward_without_a_comment_is_the_request(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        fwd = message("Ev0FWD1", "", ts="1764682000.000100", channel=DM)
        fwd["event"]["attachments"] = [shared("the db failover runbook is out of date")]
        assert await event(app.port, fwd) == 200
        (answer,) = await wait_post(fake, "failover runbook", channel=DM, timeout=15)
        assert "Grace" in answer.args["markdown_text"]
        assert not posts(fake, "`!new`", channel=DM), "answered with the help text"


async def test_a_forward_with_a_comment_carries_the_forwarded_message(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        fwd = message("Ev0FWD2", "summarize this please", ts="1764682100.000100", channel=DM)
        fwd["event"]["attachments"] = [shared("rotate the &lt;prod&gt; keys on Friday")]
        assert await event(app.port, fwd) == 200
        (answer,) = await wait_post(fake, "summarize this please", channel=DM, timeout=15)
        assert "rotate the <prod> keys on Friday" in answer.args["markdown_text"]


async def test_a_forwarded_file_is_downloaded_and_odd_files_do_not_fail(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        f = fake.add_file("postmortem.txt", b"root cause: dns\n")
        fwd = message("Ev0FWD3", "what went wrong?", ts="1764682200.000100", channel=DM)
        fwd["event"]["attachments"] = [{**shared("see attached"), "files": [f]}]
        assert await event(app.port, fwd) == 200
        (answer,) = await wait_post(fake, "what went wrong?", channel=DM, timeout=15)
        assert "Attachments: 1" in answer.args["markdown_text"]
        assert [d[0] for d in fake.downloads] == [f["id"]]
        # a forwarded message's files are not checked by the guard: a number there is no file
        odd = message("Ev0FWD4", "and this?", ts="1764682300.000100", channel=DM)
        odd["event"]["attachments"] = [{**shared("odd"), "files": 5}]
        assert await event(app.port, odd) == 200
        await wait_post(fake, "and this?", channel=DM, timeout=15)


async def test_socket_mode_goes_through_bolt(env: dict[str, str], fake: FakeSlackApi) -> None:
    socket = {k: v for k, v in env.items() if k != "JAZZ_BRIDGE_SLACK__SIGNING_SECRET"}
    socket.update(JAZZ_BRIDGE_SLACK__MODE="socket", JAZZ_BRIDGE_SLACK__APP_TOKEN=APP_TOKEN)
    async with running_gateway(socket) as (app, _client):
        (opened,) = fake.called("apps.connections.open")
        envelope = {
            "envelope_id": "env-0001",
            "type": "events_api",
            "payload": vector("app_mention"),
            "accepts_response_payload": False,
            "retry_attempt": 0,
            "retry_reason": "",
        }
        await fake.socket_send(envelope)
        await wait_until(lambda: bool(fake.socket_acks), 20, "the envelope acked")
        assert fake.socket_acks[0]["envelope_id"] == "env-0001"
        (answer,) = await wait_post(fake, "summarize yesterday")
        assert answer.args["thread_ts"] == MENTION_TS
        await fake.socket_send(dict(envelope, envelope_id="env-0002", retry_attempt=1))
        await wait_until(lambda: len(fake.socket_acks) == 2, 20, "the redelivery acked")
        assert sample(app, "jazz_bridge_messages_total", platform="slack", outcome="duplicate") == 1
        # Slack closes the connection: bolt's client opens a new one and events flow again
        await fake.drop_sockets()
        await wait_until(
            lambda: len(fake.called("apps.connections.open")) == 2, 20, "a new connection"
        )
        await wait_until(lambda: health(app) is None, 20, "healthy again")
        again = copy.deepcopy(vector("app_mention"))
        again["event_id"] = "Ev0AFTERDROP"
        again["event"].update(ts="1764669990.000100", text=f"<@{BOT}> after the reconnect")
        await fake.socket_send(dict(envelope, envelope_id="env-0003", payload=again))
        await wait_post(fake, "after the reconnect")
        # socket mode receives nothing over HTTP, and no signing secret is needed
        assert await event(app.port, vector("app_mention")) == 404
        assert health(app) is None
    assert opened.status == 200
    assert health(app) == "socket mode closed"


async def test_socket_mode_with_a_refused_app_token_fails_start_up_clearly(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    """slack_sdk retries a refused connection forever; start-up gives up (bounded), names
    the app token, and the gateway is not left half up."""
    socket = {k: v for k, v in env.items() if k != "JAZZ_BRIDGE_SLACK__SIGNING_SECRET"}
    socket.update(
        JAZZ_BRIDGE_SLACK__MODE="socket",
        JAZZ_BRIDGE_SLACK__APP_TOKEN="xapp-1-A0APP00001-revoked",
        JAZZ_BRIDGE_SLACK__API_TIMEOUT_S="1",
    )

    async def start() -> None:
        async with running_gateway(socket):
            pass

    with pytest.raises(AdapterError, match=r"socket mode could not connect.*slack\.app_token"):
        await asyncio.wait_for(start(), 30)
    assert [c for c in fake.calls if c.method == "apps.connections.open"]  # it was asked
