"""What the Slack test modules share: the tokens the fake Slack API accepts, the signing
secret, the gateway's environment on the fake, Slack's requests as the adapter receives them
(signed events, button presses, slash commands, built from the platform vectors), what the
fake saw, and a real ``SlackSurface`` on the fake (its fixtures are in ``conftest.py``)."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
from slack_sdk.web.async_client import AsyncWebClient

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_slack_api import Call, FakeSlackApi
from gateway_harness import gateway_env, use_reference_runner, wait_until

from adapters.slack.surface import SlackSurface
from bridge.engine import delivery
from bridge.model import InboxState

__all__ = [
    "APP_TOKEN",
    "BOT_TOKEN",
    "SECRET",
    "Call",
    "FakeSlackApi",
    "slack_env",
    "use_reference_runner",
]

BOT_TOKEN = "xoxb-0000000000-test-token-for-the-fake"
APP_TOKEN = "xapp-1-A0APP00001-test-app-token"
SECRET = "0123456789abcdef0123456789abcdef"
VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "slack"
TEAM, CHANNEL, DM = "T0TEAM0001", "C0CHAN0001", "D0DIRECT001"
ADA, GRACE, BOT = "U0USER0001", "U0USER0002", "U0BOT00001"
MENTION_TS = "1764669600.000100"


def slack_env(
    root: Path, fake_dir: Path, uid_range: tuple[int, int], fake: FakeSlackApi
) -> dict[str, str]:
    """The gateway with Slack in HTTP mode against ``fake``, open to every workspace."""
    return gateway_env(
        root,
        fake_dir,
        uid_range,
        JAZZ_BRIDGE_SLACK__BOT_TOKEN=BOT_TOKEN,
        JAZZ_BRIDGE_SLACK__SIGNING_SECRET=SECRET,
        JAZZ_BRIDGE_SLACK__API_URL=fake.api_url,
        JAZZ_BRIDGE_SLACK__ALLOW_EVERYONE="true",
    )


def vector(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((VECTORS / f"{name}.json").read_text())
    return data


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


def slash_form(
    text: str,
    *,
    channel: str = CHANNEL,
    channel_name: str = "incidents",
    user: str = ADA,
    user_name: str = "ada",
    trigger: str = "trigger-0",
    **extra: str,
) -> bytes:
    """A ``/jazz`` slash command's form body, as Slack posts it (``extra``: more fields)."""
    form = {
        "token": "x",
        "team_id": TEAM,
        "channel_id": channel,
        "channel_name": channel_name,
        "user_id": user,
        "user_name": user_name,
        "command": "/jazz",
        "text": text,
        "response_url": "https://hooks.slack.com/commands/T/1/x",
        "trigger_id": trigger,
        **extra,
    }
    return urlencode(form).encode()


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
    """Messages in the inbox, whatever their state. Counted by id: a message moving on
    (accepted -> running -> done) between two reads was counted twice by the sum of the
    states' counts; read in that order, it is seen at least once."""
    ids = {m.id for state in InboxState for m in await app.store.messages_in_state(state)}
    return len(ids)


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


def health(app: Any) -> str | None:
    found: str | None = {a.name: a.health() for a in app.adapters}["slack"]
    return found


def with_fake(api: type[FakeSlackApi]) -> pytest.MarkDecorator:
    """Run the test on ``api`` (a fake Slack API answering some method its own way) as the
    ``fake`` fixture of ``conftest.py``."""
    return pytest.mark.parametrize("fake", [api], indirect=True, ids=[api.__name__])


@asynccontextmanager
async def slack_surface(fake: FakeSlackApi) -> AsyncIterator[SlackSurface]:
    """A real ``SlackSurface`` (``AsyncWebClient``, no retry handlers) on ``fake``."""
    client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url, retry_handlers=[])
    async with aiohttp.ClientSession() as session:
        client.session = session
        surface = SlackSurface(client, BOT_TOKEN, api_url=fake.api_url, max_file_bytes=1024)
        try:
            yield surface
        finally:
            await surface.close()


def shorten_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deliverer's pauses between tries, shortened (not its patience)."""
    monkeypatch.setattr(delivery, "MAX_BACKOFF_S", 0.001)
    monkeypatch.setattr(delivery, "SLOW_BACKOFF_S", 0.01)
