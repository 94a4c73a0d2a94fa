"""What the crash and platform-fault suites share: both fake platforms, signed deliveries,
the real ``jazz-bridge serve`` process under a kill -9, and reading replies off the fakes.

The fakes are the adapters' own (``tests/adapters/slack/fake_slack_api.py`` and
``tests/adapters/telegram/fake_bot_api.py``), imported, not copied. A delivery is what the
platform does: Slack signs the body and, on a retry, sends ``X-Slack-Retry-Num`` with the
same ``event_id``; Telegram posts the same ``update_id`` with its secret header. Whether a
delivery reached the gateway matters for counting: a refused connection never did, a
connection that died mid-request did (the gateway may have stored it).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import aiohttp

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
for extra in (TESTS / "bridge", TESTS / "adapters" / "slack", TESTS / "adapters" / "telegram"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from fake_bot_api import FakeBotApi  # noqa: E402
from fake_slack_api import FakeSlackApi  # noqa: E402
from faults_support import free_port, gateway_env, install_runner, wait_until  # noqa: E402

__all__ = [
    "FakeBotApi",
    "FakeSlackApi",
    "GatewayProcess",
    "Outcome",
    "free_port",
    "install_runner",
    "platform_env",
    "platform_settings",
    "running_fakes",
    "wait_until",
]

SLACK_BOT_TOKEN = "xoxb-0000000000-crash-suite-token"
SLACK_SECRET = "fedcba9876543210fedcba9876543210"
SLACK_TEAM = "T0TEAM0001"
SLACK_BOT = "U0BOT00001"
TG_TOKEN = "999999999:AAcrash-suite_token-for-the-fake"
TG_SECRET = "crash-suite_webhook-secret"
INTERRUPTED = "interrupted before it was answered"
FAILED = "❌"
ANSWER_RE = re.compile(r"ANSWER (\S+)")


@asynccontextmanager
async def running_fakes(
    slack_token: str = SLACK_BOT_TOKEN, tg_token: str = TG_TOKEN
) -> AsyncIterator[tuple[FakeSlackApi, FakeBotApi]]:
    """The fake Slack Web API and the fake Bot API, both listening until the block ends."""
    slack, telegram = FakeSlackApi(slack_token), FakeBotApi(tg_token)
    await slack.start()
    try:
        await telegram.start()
        try:
            yield slack, telegram
        finally:
            await telegram.stop()
    finally:
        await slack.stop()


def platform_env(
    root: Path,
    fake_dir: Path,
    uid_range: tuple[int, int],
    slack: FakeSlackApi,
    telegram: FakeBotApi,
    **extra: str,
) -> dict[str, str]:
    """The gateway with Slack (HTTP mode) and Telegram (webhook mode) against the fakes."""
    env = gateway_env(root, fake_dir, uid_range, **platform_settings(slack, telegram))
    env.update(extra)
    return env


def platform_settings(slack: FakeSlackApi, telegram: FakeBotApi) -> dict[str, str]:
    """The settings that switch on Slack (HTTP mode) and Telegram (webhook mode) on the fakes."""
    return {
        "JAZZ_BRIDGE_SLACK__BOT_TOKEN": SLACK_BOT_TOKEN,
        "JAZZ_BRIDGE_SLACK__SIGNING_SECRET": SLACK_SECRET,
        "JAZZ_BRIDGE_SLACK__API_URL": slack.api_url,
        "JAZZ_BRIDGE_SLACK__ALLOW_EVERYONE": "true",
        "JAZZ_BRIDGE_TELEGRAM__TOKEN": TG_TOKEN,
        "JAZZ_BRIDGE_TELEGRAM__API_URL": telegram.api_url,
        "JAZZ_BRIDGE_TELEGRAM__WEBHOOK_URL": "https://bridge.example/telegram/webhook",
        "JAZZ_BRIDGE_TELEGRAM__WEBHOOK_SECRET": TG_SECRET,
        "JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE": "true",
        "JAZZ_BRIDGE_TELEGRAM__MIN_SEND_INTERVAL_S": "0",
    }


# -- deliveries --------------------------------------------------------------------------------


class Outcome(StrEnum):
    ACKED = "acked"  # a 2xx
    REFUSED = "refused"  # an answer that is not a 2xx (the platform delivers again)
    LOST = "lost"  # the request reached the gateway, the answer never came back
    DOWN = "down"  # no connection: the gateway never saw it


def slack_signed(body: bytes) -> dict[str, str]:
    ts = str(int(time.time()))
    digest = hmac.new(SLACK_SECRET.encode(), b"v0:" + ts.encode() + b":" + body, hashlib.sha256)
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest.hexdigest()}"}


def slack_event(
    event_id: str, text: str, *, channel: str, ts: str, thread_ts: str | None
) -> dict[str, Any]:
    """An ``app_mention`` that starts a thread, or a plain message in that thread."""
    event: dict[str, Any] = {
        "type": "app_mention" if thread_ts is None else "message",
        "user": "U0USER0001",
        "text": f"<@{SLACK_BOT}> {text}" if thread_ts is None else text,
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
        "team": SLACK_TEAM,
    }
    if thread_ts is not None:
        event.update(thread_ts=thread_ts, channel_type="channel")
    return {
        "token": "unused-verification-token",
        "team_id": SLACK_TEAM,
        "api_app_id": "A0APP00001",
        "event": event,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": int(float(ts)),
        "authorizations": [{"team_id": SLACK_TEAM, "user_id": SLACK_BOT, "is_bot": True}],
    }


def tg_update(update_id: int, chat_id: int, message_id: int, text: str) -> dict[str, Any]:
    """A private chat's text message."""
    person = {"id": chat_id, "is_bot": False, "first_name": "Ada"}
    return {
        "update_id": update_id,
        "message": {
            "message_id": message_id,
            "from": person,
            "chat": {"id": chat_id, "type": "private", "first_name": "Ada"},
            "date": int(time.time()),
            "text": text,
        },
    }


async def post(
    session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]
) -> tuple[Outcome, int]:
    try:
        async with session.post(url, data=body, headers=headers) as resp:
            await resp.read()
            return (Outcome.ACKED if 200 <= resp.status < 300 else Outcome.REFUSED), resp.status
    except aiohttp.ClientConnectorError:
        return Outcome.DOWN, 0
    except (aiohttp.ClientError, TimeoutError, OSError):
        return Outcome.LOST, 0


async def deliver_slack(
    session: aiohttp.ClientSession, base: str, body: dict[str, Any], retry: int
) -> tuple[Outcome, int]:
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **slack_signed(data)}
    if retry:
        headers.update({"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"})
    return await post(session, f"{base}/slack/events", data, headers)


async def deliver_telegram(
    session: aiohttp.ClientSession, base: str, update: dict[str, Any]
) -> tuple[Outcome, int]:
    headers = {"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": TG_SECRET}
    return await post(session, f"{base}/telegram/webhook", json.dumps(update).encode(), headers)


# -- the real serve process ----------------------------------------------------------------------


@dataclass
class Life:
    pid: int
    started: float  # time.monotonic(), like the fakes' call times
    ready: float = 0.0
    ended: float = 0.0
    killed: bool = False


class GatewayProcess:
    """``jazz-bridge serve`` on one fixed port, killed (-9) and started again at will."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.port = free_port()
        self.env = {**env, "JAZZ_BRIDGE_SERVER__PORT": str(self.port)}
        self.cwd = cwd
        self.log_path = cwd / "serve.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.lives: list[Life] = []

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    async def start(self, session: aiohttp.ClientSession, timeout: float = 60) -> None:
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start {len(self.lives) + 1} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bridge.cli", "serve"],
                env=self.env,
                cwd=self.cwd,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        life = Life(pid=self.proc.pid, started=time.monotonic())
        self.lives.append(life)
        proc = self.proc

        async def ready() -> bool:
            assert proc.poll() is None, f"serve exited {proc.returncode}:\n{self.log_tail()}"
            try:
                async with session.get(f"{self.base}/readyz") as r:
                    return r.status == 200
            except (aiohttp.ClientError, TimeoutError):
                return False

        await wait_until(ready, timeout, "the gateway to be ready")
        life.ready = time.monotonic()

    async def kill(self) -> None:
        """SIGKILL: no shutdown path runs, nothing is flushed or told."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(self.proc.wait, 30)
        self.lives[-1].ended = time.monotonic()
        self.lives[-1].killed = True

    async def stop(self) -> int:
        """SIGTERM, bounded; kill -9 if it does not end."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc is not None else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.to_thread(self.proc.wait, 30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = await asyncio.to_thread(self.proc.wait, 30)
        self.lives[-1].ended = time.monotonic()
        return int(code)

    def kill_times(self) -> list[float]:
        return [life.ended for life in self.lives if life.killed]


# -- replies as the platforms show them -----------------------------------------------------------


@dataclass(frozen=True)
class Shown:
    """One message the bot posted, as the platform keeps it."""

    text: str
    at: float  # when the fake handled the call (time.monotonic)
    reply_key: str | None = None  # Slack: the message metadata's reply key

    @property
    def answer_to(self) -> str | None:
        found = ANSWER_RE.search(self.text)
        return found.group(1) if found else None

    @property
    def interrupted(self) -> bool:
        return INTERRUPTED in self.text

    @property
    def failed(self) -> bool:
        """The core's error reply (the run failed, or its home could not be prepared)."""
        return self.text.startswith(FAILED)


def slack_shown(fake: FakeSlackApi, channel: str, thread_ts: str) -> list[Shown]:
    """The bot's messages in a thread, in the order Slack took them (with post times)."""
    found = []
    for msg in fake.thread(channel, thread_ts):
        meta = msg.get("metadata") or {}
        key = (meta.get("event_payload") or {}).get("reply_key")
        text = str(msg.get("markdown_text") or msg.get("text") or "")
        at = fake.posted_at.get(str(msg["ts"]), 0.0)
        found.append(Shown(text, at, key if isinstance(key, str) else None))
    return found


def telegram_shown(fake: FakeBotApi, chat_id: int) -> list[Shown]:
    """The bot's messages in a chat (every sendMessage Telegram accepted), in order."""
    return [
        Shown(str(c.params.get("text") or ""), c.at)
        for c in fake.calls
        if c.method == "sendMessage" and c.status == 200 and int(c.params["chat_id"]) == chat_id
    ]


def runs_logged(fake_dir: Path) -> list[dict[str, Any]]:
    """Every run the crash runner logged (one JSON line each), oldest first."""
    found = []
    for path in fake_dir.glob("runs-*.jsonl"):
        for line in path.read_text().splitlines():
            if line.strip():
                found.append(json.loads(line))
    return sorted(found, key=lambda r: r["t"])
