"""The Slack adapter: the real gateway, real bolt and the real AsyncWebClient against a fake
Slack Web API; every request signed like Slack signs it (built from the platform vectors)."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import hmac
import json
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
from slack_sdk.signature import SignatureVerifier
from slack_support import APP_TOKEN, BOT_TOKEN, SECRET

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_slack_api import Call, FakeSlackApi
from gateway_harness import running_gateway, use_reference_runner, wait_until

from adapters.slack.surface import CHAT_UPDATE_BURST, CHAT_UPDATE_PER_MINUTE
from bridge.errors import AdapterError
from bridge.model import InboxState

VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "slack"
TEAM, CHANNEL, DM = "T0TEAM0001", "C0CHAN0001", "D0DIRECT001"
ADA, GRACE, BOT = "U0USER0001", "U0USER0002", "U0BOT00001"
MENTION_TS = "1764669600.000100"


def vector(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((VECTORS / f"{name}.json").read_text())
    return data


@pytest.fixture
def env(env: dict[str, str], fake_dir: Path) -> dict[str, str]:
    """The package's environment (conftest.py) with the bundled reference runner."""
    use_reference_runner(env, fake_dir)
    return env


def sign(body: bytes, *, secret: str = SECRET, timestamp: int | None = None) -> dict[str, str]:
    ts = str(int(time.time()) if timestamp is None else timestamp)
    base = b"v0:" + ts.encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


async def send(
    port: int,
    body: bytes,
    *,
    form: bool = False,
    headers: dict[str, str] | None = None,
    signed: dict[str, str] | None = None,
) -> tuple[int, str]:
    h = {"Content-Type": "application/x-www-form-urlencoded" if form else "application/json"}
    h.update(sign(body) if signed is None else signed)
    h.update(headers or {})
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"http://127.0.0.1:{port}/slack/events", data=body, headers=h) as r,
    ):
        return r.status, await r.text()


async def event(port: int, body: dict[str, Any], retry: int = 0) -> int:
    headers = {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "timeout"} if retry else {}
    status, _ = await send(port, json.dumps(body).encode(), headers=headers)
    return status


async def action(port: int, payload: dict[str, Any]) -> int:
    body = urlencode({"payload": json.dumps(payload)}).encode()
    status, _ = await send(port, body, form=True)
    return status


def message(
    event_id: str,
    text: str,
    *,
    user: str = ADA,
    channel: str = CHANNEL,
    ts: str,
    thread_ts: str | None = None,
    kind: str = "message",
    **extra: Any,
) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "type": kind,
        "user": user,
        "text": text,
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
        "team": TEAM,
        **extra,
    }
    if kind == "message":
        ev["channel_type"] = "im" if channel.startswith("D") else "channel"
    if thread_ts:
        ev["thread_ts"] = thread_ts
    body = copy.deepcopy(vector("app_mention"))
    body.update(event=ev, event_id=event_id)
    return body


def mention(event_id: str, text: str, ts: str, **kw: Any) -> dict[str, Any]:
    return message(event_id, f"<@{BOT}> {text}", ts=ts, kind="app_mention", **kw)


def posts(fake: FakeSlackApi, contains: str = "", channel: str | None = None) -> list[Call]:
    return [
        c
        for c in fake.called("chat.postMessage")
        if contains in str(c.args.get("markdown_text") or c.args.get("text") or "")
        and (channel is None or c.args.get("channel") == channel)
    ]


async def wait_post(
    fake: FakeSlackApi, contains: str, count: int = 1, timeout: float = 30, **kw: Any
) -> list[Call]:
    found: list[Call] = []

    def check() -> bool:
        nonlocal found
        found = posts(fake, contains, **kw)
        return len(found) >= count

    try:
        await wait_until(check, timeout, f"{count} chat.postMessage with {contains!r}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the fake Slack API saw {seen(fake)}") from None
    return found


def seen(fake: FakeSlackApi) -> list[tuple[str, int, str]]:
    """What the fake saw, for failure messages."""
    return [
        (c.method, c.status, str(c.args.get("markdown_text") or c.args.get("text"))[:70])
        for c in fake.calls
    ]


def sample(app: Any, name: str, **labels: str) -> float:
    value = app.metrics.registry.get_sample_value(name, labels)
    return float(value or 0.0)


async def stored(app: Any) -> int:
    return sum([len(await app.store.messages_in_state(s)) for s in InboxState])


def buttons(call: Call) -> list[dict[str, Any]]:
    return [
        e
        for block in call.args.get("blocks") or []
        if block.get("type") == "actions"
        for e in block["elements"]
    ]


def press_payload(value: str, user: str, call: Call, ts: str) -> dict[str, Any]:
    payload = copy.deepcopy(vector("block_actions"))
    payload["user"]["id"] = user
    payload["container"].update(message_ts=ts, thread_ts=call.args.get("thread_ts"))
    payload["container"]["channel_id"] = call.args["channel"]
    payload["channel"]["id"] = call.args["channel"]
    payload["message"].update(ts=ts, thread_ts=call.args.get("thread_ts"))
    payload["actions"][0].update(value=value, action_id="jb_choice_0")
    return payload


def posted_ts(fake: FakeSlackApi, call: Call) -> str:
    index = fake.called("chat.postMessage").index(call)
    msgs = [m for ms in fake.messages.values() for m in ms if "files" not in m]  # posts only
    ordered = sorted(msgs, key=lambda m: m["ts"])
    return str(ordered[index]["ts"])


# -- intake ------------------------------------------------------------------------------------


def test_the_documented_signature_example_verifies() -> None:
    doc = vector("signature")
    verifier = SignatureVerifier(doc["signing_secret"], clock=_Clock(int(doc["timestamp"])))
    body = doc["body"]
    assert (
        verifier.generate_signature(timestamp=doc["timestamp"], body=body)
        == (doc["expected_signature"])
    )
    headers = {
        "x-slack-request-timestamp": doc["timestamp"],
        "x-slack-signature": doc["expected_signature"],
    }
    assert verifier.is_valid_request(body, headers)
    assert not verifier.is_valid_request(body + "x", headers)
    # and our own signing helper is the same algorithm
    ours = sign(body.encode(), secret=doc["signing_secret"], timestamp=int(doc["timestamp"]))
    assert ours["X-Slack-Signature"] == doc["expected_signature"]


class _Clock:
    def __init__(self, now: int) -> None:
        self._now = now

    def now(self) -> float:
        return float(self._now)


async def test_bad_or_stale_signatures_are_refused_and_counted(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        body = json.dumps(vector("app_mention")).encode()
        bad = sign(body, secret="not-the-secret-at-all-0000000000")
        assert (await send(app.port, body, signed=bad))[0] == 401
        stale = sign(body, timestamp=int(time.time()) - 6 * 60)
        assert (await send(app.port, body, signed=stale))[0] == 401
        assert (await send(app.port, body, signed={}))[0] == 401
        auth = "jazz_bridge_auth_failures_total"
        assert sample(app, auth, platform="slack", reason="signature") == 1
        assert sample(app, auth, platform="slack", reason="stale") == 1
        assert sample(app, auth, platform="slack", reason="missing") == 1
        assert await stored(app) == 0
        # url_verification: the challenge comes back (signed, like every request)
        status, text = await send(app.port, json.dumps(vector("url_verification")).encode())
        assert status == 200
        assert vector("url_verification")["challenge"] in text
        assert await stored(app) == 0
        assert not fake.called("chat.postMessage")


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


# -- buttons, commands -------------------------------------------------------------------------


async def test_only_the_requester_may_answer_and_the_buttons_go_away(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        # a stale button first: "expired", said only to the presser
        assert await action(app.port, vector("block_actions")) == 200
        await wait_until(lambda: bool(fake.called("chat.postEphemeral")), 10, "an ephemeral")
        (stale,) = fake.called("chat.postEphemeral")
        assert "expired" in stale.args["text"] and stale.args["user"] == ADA

        assert (
            await event(app.port, mention("Ev0ASK", "!approve bash", ts="1764669800.000100")) == 200
        )
        (prompt,) = await wait_post(fake, "Approval needed")
        assert prompt.args["thread_ts"] == "1764669800.000100"
        approve = next(b for b in buttons(prompt) if b["text"]["text"] == "Approve")
        ts = posted_ts(fake, prompt)

        assert await action(app.port, press_payload(approve["value"], GRACE, prompt, ts)) == 200
        await wait_until(lambda: len(fake.called("chat.postEphemeral")) == 2, 10, "ephemeral")
        refusal = fake.called("chat.postEphemeral")[-1]
        assert refusal.args["user"] == GRACE and refusal.args["text"].startswith("Only")
        assert "can answer" in refusal.args["text"]
        assert refusal.args["thread_ts"] == "1764669800.000100"
        assert not posts(fake, "approved")  # Grace's press answered nothing

        assert await action(app.port, press_payload(approve["value"], ADA, prompt, ts)) == 200
        await wait_post(fake, "bash")  # the run goes on and answers
        await wait_until(
            lambda: any(c.args.get("ts") == ts for c in fake.called("chat.update")),
            10,
            "the prompt message updated",
        )
        update = next(c for c in fake.called("chat.update") if c.args.get("ts") == ts)
        assert not buttons(update) and "approved" in update.args["text"].lower()
        assert len(fake.called("chat.postEphemeral")) == 2


async def test_an_answered_prompt_loses_its_buttons_even_after_a_429(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    """The press's chat.update is rate limited once: it is held and sent when Slack reopens
    (not dropped with a warning, leaving buttons on an answered prompt)."""
    async with running_gateway(env) as (app, _client):
        ask = mention("Ev0ASK429", "!approve bash", ts="1764669900.000100")
        assert await event(app.port, ask) == 200
        (prompt,) = await wait_post(fake, "Approval needed")
        approve = next(b for b in buttons(prompt) if b["text"]["text"] == "Approve")
        ts = posted_ts(fake, prompt)
        fake.fail("chat.update", "429", retry_after=1, when=lambda a: a.get("ts") == ts)
        assert await action(app.port, press_payload(approve["value"], ADA, prompt, ts)) == 200

        def settled() -> list[Any]:
            return [c for c in fake.called("chat.update") if c.args.get("ts") == ts]

        await wait_until(lambda: bool(settled()), 15, "the prompt updated after the 429")
        assert any(c.args.get("ts") == ts for c in fake.called("chat.update", ok=False))
        assert not buttons(settled()[-1]) and "approved" in settled()[-1].args["text"].lower()


async def test_stop_button_and_thread_commands(env: dict[str, str], fake: FakeSlackApi) -> None:
    async with running_gateway(env) as (app, _client):
        root = "1764669900.000100"
        assert await event(app.port, mention("Ev0SLOW", "!delay 30", ts=root)) == 200

        def bubble() -> list[Call]:
            return [c for c in fake.called("chat.postMessage") if buttons(c)]

        await wait_until(lambda: bool(bubble()), 15, "a progress message with a Stop button")
        (stop,) = buttons(bubble()[0])
        assert stop["text"]["text"] == "Stop" and bubble()[0].args["thread_ts"] == root
        await wait_until(lambda: bool(fake.called("chat.update")), 10, "a progress edit")
        assert fake.called("assistant.threads.setStatus")

        def thread_cmd(n: int, text: str, user: str = ADA) -> dict[str, Any]:
            return message(
                f"Ev0CMD{n}", text, user=user, ts=f"1764669901.00{n:04d}", thread_ts=root
            )

        assert await event(app.port, thread_cmd(1, "!status")) == 200
        (status,) = await wait_post(fake, "Running")
        assert status.args["thread_ts"] == root
        assert await event(app.port, thread_cmd(2, "!stop", user=GRACE)) == 200
        await wait_post(fake, "who started this run")  # Grace may not stop Ada's run
        assert await event(app.port, thread_cmd(3, "!help")) == 200
        await wait_post(fake, "`!new`")  # the help, in the form Slack lets through

        ts = posted_ts(fake, bubble()[0])
        assert await action(app.port, press_payload(stop["value"], ADA, bubble()[0], ts)) == 200
        await wait_post(fake, "Stopped by")
        await wait_until(
            lambda: any(
                c.args.get("ts") == ts and not buttons(c) for c in fake.called("chat.update")
            ),
            10,
            "the bubble closed without its button",
        )
        assert await event(app.port, thread_cmd(4, "!new")) == 200
        await wait_post(fake, "fresh conversation")
        assert await event(app.port, thread_cmd(5, "again\n!delay 0.1")) == 200
        (after,) = await wait_post(fake, "again")  # a runner directive still reaches the runner
        assert "Earlier turns in this conversation: 0" in after.args["markdown_text"]
        await wait_until(
            lambda: sample(app, "jazz_bridge_runs_total", outcome="ok") == 1, 20, "that run"
        )
        shown = len(bubble())
        assert await event(app.port, thread_cmd(6, "once more\n!delay 30")) == 200
        try:
            await wait_until(lambda: len(bubble()) > shown, 20, "another progress message")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the fake saw {seen(fake)}") from None
        assert await event(app.port, thread_cmd(7, "!stop")) == 200
        await wait_post(fake, "⏹️ Stopped.")
        await wait_post(fake, "Stopped by", count=2)


async def test_an_expired_stop_button_loses_its_button_when_pressed(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    """A progress bubble left by an earlier process (a crash: nothing turned it into a
    summary) still shows "working" and a Stop button. Pressing it, the core answers EXPIRED
    with ``resolved`` ("This run has ended.", no buttons): the bubble is edited to it, as on
    Telegram, and the presser is still told (ephemeral), not left with a stale button."""
    stale_stop = "AbCdEfGhIjKlMnOp.stop"  # the shape prompts.new_token() + ".stop" has
    stop_button = {
        "type": "button",
        "action_id": "jb_choice_0",
        "text": {"type": "plain_text", "text": "Stop"},
        "value": stale_stop,
        "style": "danger",
    }
    bubble = fake._post(
        {
            "channel": CHANNEL,
            "thread_ts": MENTION_TS,
            "text": "working… 12s",
            "blocks": [
                {"type": "markdown", "text": "working… 12s"},
                {"type": "actions", "block_id": "jb_choices_0", "elements": [stop_button]},
            ],
        }
    )
    ts = bubble["ts"]
    async with running_gateway(env) as (app, _client):
        payload = copy.deepcopy(vector("block_actions"))
        payload["container"].update(message_ts=ts, thread_ts=MENTION_TS, channel_id=CHANNEL)
        payload["message"].update(ts=ts, thread_ts=MENTION_TS)
        payload["actions"][0].update(value=stale_stop, action_id="jb_choice_0")
        assert await action(app.port, payload) == 200
        try:
            await wait_until(
                lambda: any(c.args.get("ts") == ts for c in fake.called("chat.update")),
                10,
                "the stale bubble edited without its Stop button",
            )
            await wait_until(
                lambda: bool(fake.called("chat.postEphemeral")), 10, "the presser told"
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the fake saw {seen(fake)}") from None
        (msg,) = [m for m in fake.messages[CHANNEL] if m["ts"] == ts]
        assert not [b for b in msg.get("blocks") or [] if b.get("type") == "actions"]
        assert "ended" in str(msg.get("text"))
        (told,) = fake.called("chat.postEphemeral")
        assert told.args["user"] == ADA and told.args["thread_ts"] == MENTION_TS


async def test_a_stop_press_is_acked_within_slacks_three_seconds(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    """Slack wants an interaction acked within 3 seconds, else it shows the presser an error.
    _on_action acks after the core's press(); for a Stop that must return at once, not once
    the runner has exited (SIGTERM, then up to runner.kill_grace_s): a runner slow to exit
    must not make the Stop press "fail" in Slack although the run does stop."""
    env["JAZZ_BRIDGE_RUNNER__KILL_GRACE_S"] = "5"
    async with running_gateway(env) as (app, _client):
        root = "1764669950.000100"
        assert await event(app.port, mention("Ev0SLOWSTOP", "!ignore-term", ts=root)) == 200

        def bubble() -> list[Call]:
            return [c for c in fake.called("chat.postMessage") if buttons(c)]

        await wait_until(lambda: bool(bubble()), 15, "a progress message with a Stop button")
        (stop,) = buttons(bubble()[0])
        payload = press_payload(stop["value"], ADA, bubble()[0], posted_ts(fake, bubble()[0]))
        started = asyncio.get_running_loop().time()
        status = await asyncio.wait_for(action(app.port, payload), timeout=20)
        took = asyncio.get_running_loop().time() - started
        assert status == 200
        await wait_post(fake, "Stopped by", timeout=20)
        assert took < 3.0, f"the Stop press was acked after {took:.1f}s (Slack allows 3s)"


async def test_jazz_slash_command_acts_on_the_channel_or_dm(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):

        async def slash(text: str, channel: str = CHANNEL, n: int = 0) -> tuple[int, str]:
            form = {
                "token": "x",
                "team_id": TEAM,
                "channel_id": channel,
                "channel_name": "directmessage" if channel == DM else "incidents",
                "user_id": ADA,
                "user_name": "ada",
                "command": "/jazz",
                "text": text,
                "response_url": "https://hooks.slack.com/commands/T/1/x",
                "trigger_id": f"trigger-{n}",
            }
            return await send(app.port, urlencode(form).encode(), form=True)

        status, text = await slash("help")
        assert status == 200 and "!status" in text
        status, text = await slash("status", n=1)
        assert status == 200 and "No conversation" in text
        assert await event(app.port, vector("app_mention")) == 200
        await wait_post(fake, "summarize yesterday")
        status, text = await slash("status", n=2)
        assert status == 200 and "thread" in text
        (answer,) = await wait_post(fake, "Idle")
        assert answer.args["thread_ts"] == MENTION_TS and answer.args["channel"] == CHANNEL
        # a DM the bot has no conversation in (one between two people: a reply posted
        # there would be refused) is told so, and nothing is posted there
        status, text = await slash("new", channel=DM, n=3)
        assert status == 200 and "No conversation" in text
        assert not [c for c in fake.calls if c.args.get("channel") == DM]
        assert await event(app.port, vector("direct_message")) == 200
        await wait_post(fake, "deploy config", channel=DM)
        status, _ = await slash("new", channel=DM, n=4)
        assert status == 200
        (fresh,) = await wait_post(fake, "fresh conversation", channel=DM)
        assert "thread_ts" not in fresh.args


# -- replies -----------------------------------------------------------------------------------


async def test_a_long_answer_is_split_between_blocks(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        assert (
            await event(app.port, mention("Ev0LONG", "!long 30000", ts="1764670200.000100")) == 200
        )
        await wait_until(
            lambda: sample(app, "jazz_bridge_runs_total", outcome="ok") == 1, 30, "the run"
        )
        await wait_until(
            lambda: sample(app, "jazz_bridge_replies_total", surface="slack", result="sent") >= 3,
            30,
            "the answer's parts",
        )
        parts = [c for c in posts(fake) if "markdown_text" in c.args]
        assert len(parts) >= 3
        text = "".join(str(c.args["markdown_text"]) for c in parts)
        assert "Paragraph 1." in text
        for call in parts:
            body = str(call.args["markdown_text"])
            assert len(body) <= 12_000
            assert body.count("```") % 2 == 0  # never cut inside a code block
            assert call.args["thread_ts"] == "1764670200.000100"
        keys = [c.args["metadata"]["event_payload"]["reply_key"] for c in parts]
        assert len(keys) == len(set(keys))


async def test_an_artifact_is_uploaded_into_the_thread(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        root = "1764670300.000100"
        assert await event(app.port, mention("Ev0ART", "!artifact plot.png", ts=root)) == 200
        await wait_until(
            lambda: bool(fake.called("files.completeUploadExternal")), 30, "the upload"
        )
        (url,) = fake.called("files.getUploadURLExternal")
        assert url.args["filename"] == "plot.png"
        (upload,) = [c for c in fake.calls if c.method == "upload"]
        assert upload.data is not None and upload.data.startswith(b"\x89PNG")
        (done,) = fake.called("files.completeUploadExternal")
        assert done.args["channel_id"] == CHANNEL and done.args["thread_ts"] == root


async def test_a_shared_file_is_downloaded_into_the_home(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        f = fake.add_file("notes.txt", b"incident notes\n")
        body = mention("Ev0FILE", "read this", ts="1764670400.000100", files=[f])
        body["event"]["subtype"] = "file_share"
        assert await event(app.port, body) == 200
        (answer,) = await wait_post(fake, "read this")
        assert "Attachments: 1" in answer.args["markdown_text"]
        (download,) = fake.downloads
        assert download == (f["id"], f"Bearer {BOT_TOKEN}")
        key = f"slack:{TEAM}:{CHANNEL}:1764670400.000100"
        home = await asyncio.to_thread(app.provisioned.homes.ensure, key)
        (saved,) = (home.path / "workspace" / "attachments").glob("*notes.txt")
        assert saved.read_bytes() == b"incident notes\n"
        assert f"attachments/{saved.name}" in answer.args["markdown_text"]
        assert saved.stat().st_uid == home.account.uid

        login = fake.add_file("secret.pdf", b"%PDF", login_page=True)
        body = mention("Ev0LOGIN", "and this", ts="1764670500.000100", files=[login])
        assert await event(app.port, body) == 200
        (error,) = await wait_post(fake, "login page")
        assert error.args["thread_ts"] == "1764670500.000100"
        home2 = await asyncio.to_thread(
            app.provisioned.homes.ensure, f"slack:{TEAM}:{CHANNEL}:1764670500.000100"
        )
        assert not list((home2.path / "workspace" / "attachments").glob("*secret.pdf"))


async def test_a_429_on_chat_update_is_honoured_and_the_answer_sent_once(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    fake.fail("chat.update", "429", retry_after=2)
    async with running_gateway(env) as (app, _client):
        assert await event(app.port, mention("Ev0RATE", "!delay 4", ts="1764670600.000100")) == 200
        await wait_post(fake, "You said")
        await wait_until(
            lambda: sample(app, "jazz_bridge_replies_total", surface="slack", result="sent") >= 1,
            10,
            "the answer recorded as sent",
        )
        refused = [c for c in fake.calls if c.method == "chat.update" and c.status == 429]
        assert len(refused) == 1
        later = [c for c in fake.called("chat.update") if c.at > refused[0].at]
        await wait_until(lambda: bool(fake.called("chat.update")), 10, "an edit after the 429")
        later = [c for c in fake.called("chat.update") if c.at > refused[0].at]
        assert later and later[0].at - refused[0].at >= 1.9  # nothing inside Retry-After
        assert len(posts(fake, "You said")) == 1


async def test_an_upload_whose_answer_was_lost_is_found_not_uploaded_again(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    """Slack shared the file, the answer never came: files carry no metadata, so the thread
    is searched for the same file (name, size) before the upload is tried again."""
    fake.fail("files.completeUploadExternal", "drop", commit=True)
    async with running_gateway(env) as (app, _client):
        root = "1764670300.000100"
        assert await event(app.port, mention("Ev0ART", "!artifact plot.png", ts=root)) == 200
        await wait_until(
            lambda: (
                sample(app, "jazz_bridge_replies_total", surface="slack", result="confirmed") >= 1
            ),
            30,
            "the upload found in the thread",
        )
        shared = [m for m in fake.thread(CHANNEL, root) if m.get("files")]
        assert [f["name"] for m in shared for f in m["files"]] == ["plot.png"]
        # the one completion (whose answer was dropped), and no second upload
        assert [c.method for c in fake.calls if c.method.startswith("files.")] == [
            "files.getUploadURLExternal",
            "files.completeUploadExternal",
        ]
        assert fake.called("conversations.replies")


@pytest.mark.parametrize("kind", ["5xx", "internal_error", "drop"])
async def test_an_unclear_post_failure_is_checked_not_resent(
    env: dict[str, str], fake: FakeSlackApi, kind: str
) -> None:
    fake.fail(
        "chat.postMessage",
        kind,
        commit=True,  # Slack posted it, the gateway can't know
        when=lambda a: "incident notes" in str(a.get("markdown_text")),
    )
    async with running_gateway(env) as (app, _client):
        assert await event(app.port, vector("app_mention")) == 200
        await wait_until(
            lambda: bool(fake.called("conversations.replies")), 20, "the metadata lookup"
        )
        (lookup,) = fake.called("conversations.replies")
        assert lookup.args["ts"] == MENTION_TS
        assert str(lookup.args["include_all_metadata"]).lower() in ("1", "true")
        # the core's retry asks the surface (find_sent) first: found, it is "confirmed"
        await wait_until(
            lambda: (
                sample(app, "jazz_bridge_replies_total", surface="slack", result="confirmed") >= 1
            ),
            10,
            "the reply recorded as sent (confirmed by the lookup)",
        )
        landed = [m for m in fake.thread(CHANNEL, MENTION_TS) if "incident notes" in m["text"]]
        assert len(landed) == 1
        attempts = [c for c in fake.calls if "incident notes" in str(c.args.get("markdown_text"))]
        assert len(attempts) == 1  # never resent


async def test_allowlists_and_configuration_errors(env: dict[str, str], fake: FakeSlackApi) -> None:
    no_list = dict(env, JAZZ_BRIDGE_SLACK__ALLOW_EVERYONE="false")
    with pytest.raises(AdapterError, match=r"slack\.allowed_teams"):
        async with running_gateway(no_list):
            pass
    no_secret = {k: v for k, v in env.items() if k != "JAZZ_BRIDGE_SLACK__SIGNING_SECRET"}
    # unset, or set to nothing (an unset variable in a unit file): an empty HMAC key is one
    # anyone can sign with, so the gateway does not start with it
    for secret in (None, "", "   "):
        configured = (
            no_secret
            if secret is None
            else {**no_secret, "JAZZ_BRIDGE_SLACK__SIGNING_SECRET": secret}
        )
        with pytest.raises(AdapterError, match=r"slack\.signing_secret"):
            async with running_gateway(configured):
                pass
    for key, value in (
        ("ALLOWED_TEAMS", '["T0OTHER"]'),
        ("ALLOWED_CHANNELS", '["C0OTHER"]'),
        ("ALLOWED_USERS", f'["{GRACE}"]'),
    ):
        limited = dict(no_list, **{f"JAZZ_BRIDGE_SLACK__{key}": value})
        async with running_gateway(limited) as (app, _client):
            assert await event(app.port, vector("app_mention")) == 200  # Ada in C0CHAN0001
            assert (
                sample(app, "jazz_bridge_messages_total", platform="slack", outcome="denied") == 1
            )
            assert await stored(app) == 0
    assert not fake.called("chat.postMessage")
    ada_only = dict(no_list, JAZZ_BRIDGE_SLACK__ALLOWED_USERS=f'["{ADA}"]')
    async with running_gateway(ada_only) as (app, _client):
        assert await event(app.port, vector("app_mention")) == 200
        await wait_post(fake, "summarize yesterday")


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


def health(app: Any) -> str | None:
    found: str | None = {a.name: a.health() for a in app.adapters}["slack"]
    return found


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


async def test_a_held_progress_edit_never_lands_after_the_summary(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    """A progress edit refused by a 429 is held; when it is sent at last its request is slow,
    and the run ends meanwhile: the bubble must end on the summary, not on that stale edit
    (with its Stop button)."""
    thread = "1764670700.000100"

    def progress(args: dict[str, Any]) -> bool:
        return "working" in str(args.get("text"))

    fake.fail("chat.update", "429", retry_after=1, when=progress)
    fake.fail("chat.update", "slow", stall_s=3.0, when=progress)
    async with running_gateway(env) as (app, _client):
        assert await event(app.port, mention("Ev0HELD", "!delay 9", ts=thread)) == 200
        await wait_post(fake, "You said", timeout=40)
        refused = next(c for c in fake.calls if c.method == "chat.update" and c.status == 429)

        def slow_one_done() -> bool:  # the held edit's slow request has been answered
            return any(
                c.at > refused.at and progress(c.args) for c in fake.called("chat.update")
            ) or not [f for f in fake.failures if f.kind == "slow" and f.times == 0]

        await wait_until(slow_one_done, 20, "the held edit's slow request answered")
        (bubble,) = [m for m in fake.thread(CHANNEL, thread) if m["ts"] == refused.args.get("ts")]
        await wait_until(lambda: str(bubble.get("text")).startswith("✓"), 10, "the summary")
        assert not [b for b in bubble.get("blocks") or [] if b.get("type") == "actions"]


async def test_the_bubbles_of_one_workspace_share_its_chat_update_budget(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    """Five long runs in one workspace want more chat.update calls than its budget (all
    their bubbles change at once): the calls Slack receives from that workspace stay within
    it, every bubble ends on its summary, never on an older state. A run in another
    workspace at the same time is not held back: its bubble shows each of its states, and
    its summary lands before its answer is posted, as with no other run about."""
    env = {**env, "JAZZ_BRIDGE_LIMITS__MAX_CONCURRENT_RUNS": "8"}
    env["JAZZ_BRIDGE_LIMITS__MAX_RUNS_PER_USER"] = "0"  # the five run at once: one person's,
    env["JAZZ_BRIDGE_LIMITS__MAX_RUNS_PER_TEAM"] = "0"  # in one workspace
    other_team, other_channel = "T0TEAM0002", "C0CHAN0002"
    busy = [f"1764671{i}00.000100" for i in range(5)]
    async with running_gateway(env) as (app, _client):
        for i, ts in enumerate(busy):
            assert await event(app.port, mention(f"Ev0BUSY{i}", "!delay 14", ts=ts)) == 200
        quiet = mention("Ev0QUIET", "!delay 14", ts="1764671900.000100", channel=other_channel)
        quiet["team_id"] = other_team
        quiet["event"]["team"] = other_team
        assert await event(app.port, quiet) == 200
        answers = await wait_post(fake, "You said", count=6, timeout=60)
        bubbles = {
            (c.args["channel"], posted_ts(fake, c)): c
            for c in fake.called("chat.postMessage")
            if buttons(c)
        }
        assert len(bubbles) == 6, seen(fake)

        def shown(channel: str, ts: str) -> str:
            (msg,) = [m for m in fake.messages[channel] if m["ts"] == ts]
            return str(msg.get("text"))

        await wait_until(
            lambda: all(shown(ch, ts).startswith("✓") for ch, ts in bubbles),
            30,
            "every bubble closed with its summary",
        )
        assert not [c for c in fake.calls if c.method == "chat.update" and c.status != 200]

        def edits(channel: str, ts: str | None = None) -> list[Call]:
            return [
                c
                for c in fake.calls
                if c.method == "chat.update"
                and c.args.get("channel") == channel
                and (ts is None or c.args.get("ts") == ts)
            ]

        # the busy workspace: within its budget over every window of its calls
        rate = (CHAT_UPDATE_PER_MINUTE - CHAT_UPDATE_BURST) / 60
        jitter = 1.0  # seconds: the calls are timed as they reach the fake, not as sent
        at = [c.at for c in edits(CHANNEL)]
        for i, first in enumerate(at):
            for j in range(i, len(at)):
                allowed = CHAT_UPDATE_BURST + (at[j] - first + jitter) * rate
                assert j - i + 1 <= allowed, f"{j - i + 1} edits in {at[j] - first:.2f}s: {at}"
        for channel, ts in bubbles:
            calls = edits(channel, ts)
            final = calls[-1]
            assert final.args["text"].startswith("✓") and not buttons(final)
            progress = [int(c.args["text"].rsplit(" ", 1)[-1].rstrip("s")) for c in calls[:-1]]
            assert progress == sorted(progress)  # never an older state after a newer one
            assert all(buttons(c) for c in calls[:-1])
        # the quiet workspace: each state shown, and the summary before the answer
        (quiet_ts,) = [ts for ch, ts in bubbles if ch == other_channel]
        quiet_edits = edits(other_channel, quiet_ts)
        assert [c.args["text"].rsplit(" ", 1)[-1] for c in quiet_edits[:-1]] == ["5s", "10s"]
        (answer,) = [c for c in answers if c.args["channel"] == other_channel]
        assert quiet_edits[-1].at < answer.at
