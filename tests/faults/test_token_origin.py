"""Red team (issue 21, finding 7): a bot token goes only where its platform's API is.

Both adapters download the person's files with the bot token: Slack sends it as a bearer to
the file's ``url_private_download``, Telegram puts it in the path of every Bot API file URL
(``/file/bot<token>/...``). Slack's check compared only the host: a file URL on the API's
host but another port (``http://slack.com:8080/...``), or over plain ``http://``, got the
token. Now the token goes only to the configured API's own scheme, host and port (default
ports normalised: https 443, http 80), or to Slack's own https hosts on 443.

Each case points a file URL at a recording server of this test on another port (or the
API's port under the other scheme) and asserts that no request it saw carried the token,
against the real gateway with the fake Slack Web API, the real Slack surface, and the real
gateway with the fake Bot API. Every wait is bounded.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from accounts_support import needs_root, remove_accounts
from aiohttp import web
from fake_bot_api import FakeBotApi
from fake_slack_api import FakeSlackApi
from gateway_harness import gateway_env, running_gateway, wait_until
from platforms_support import slack_event, slack_signed
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.surface import SlackSurface
from bridge.model import Attachment
from bridge.ports import DeliveryError

pytestmark = [
    pytest.mark.faults,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]

# platforms_support's Slack delivery signs with its secret and names its team and bot
SLACK_TOKEN = "xoxb-0000000000-token-origin-suite"
SLACK_SECRET = "fedcba9876543210fedcba9876543210"
TG_TOKEN = "999999999:AAtoken-origin_suite-for-the-fake"
TG_SECRET = "token-origin_webhook-secret"
ADA = 111111111


@dataclass
class Seen:
    path: str
    authorization: str | None
    scheme: str


@dataclass
class Recorder:
    """A local HTTP server that answers every GET with a file and records what came."""

    seen: list[Seen] = field(default_factory=list)
    port: int = 0
    runner: web.AppRunner | None = None

    async def start(self, port: int = 0) -> None:
        async def any_file(request: web.Request) -> web.Response:
            auth = request.headers.get("Authorization")
            self.seen.append(Seen(request.path_qs, auth, request.scheme))
            return web.Response(body=b"the file", content_type="application/octet-stream")

        app = web.Application()
        app.router.add_get("/{tail:.*}", any_file)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", port)
        await site.start()
        self.port = int(self.runner.addresses[0][1])

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    def with_token(self, token: str) -> list[Seen]:
        return [s for s in self.seen if token in (s.authorization or "") or token in s.path]


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    rec = Recorder()
    await rec.start()
    yield rec
    await rec.stop()


# -- Slack: through the gateway --------------------------------------------------------------


@pytest.fixture
def slack_env(
    tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int], slack_api: FakeSlackApi
) -> Iterator[dict[str, str]]:
    yield gateway_env(
        tmp_path / "root",
        fake_dir,
        uid_range,
        JAZZ_BRIDGE_WEB__ENABLED="false",
        JAZZ_BRIDGE_SLACK__BOT_TOKEN=SLACK_TOKEN,
        JAZZ_BRIDGE_SLACK__SIGNING_SECRET=SLACK_SECRET,
        JAZZ_BRIDGE_SLACK__API_URL=slack_api.api_url,
        JAZZ_BRIDGE_SLACK__ALLOW_EVERYONE="true",
    )
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def deliver_slack(port: int, body: dict[str, Any]) -> int:
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **slack_signed(data)}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"http://127.0.0.1:{port}/slack/events", data=data, headers=headers) as r,
    ):
        return r.status


@needs_root
async def test_slack_sends_no_token_to_another_port_of_the_api_host(
    slack_env: dict[str, str], slack_api: FakeSlackApi, recorder: Recorder
) -> None:
    """A shared file whose URL is the API's host (127.0.0.1) on another port."""
    shared = slack_api.add_file("notes.txt", b"incident notes\n")
    elsewhere = f"http://127.0.0.1:{recorder.port}/files-pri/T0TEAM0001-{shared['id']}/notes.txt"
    shared.update(url_private=elsewhere, url_private_download=elsewhere)
    ts = f"{int(time.time())}.000100"
    body = slack_event("EvOrigin0001", "read this", channel="C0CHAN0001", ts=ts, thread_ts=None)
    body["event"].update(subtype="file_share", files=[shared])
    async with running_gateway(slack_env) as (app, _client):
        assert await deliver_slack(app.port, body) == 200

        def answered() -> bool:
            return bool(slack_api.thread("C0CHAN0001", ts))

        await wait_until(answered, 30, "the reply in the thread")
        replies = [
            str(m.get("markdown_text") or m.get("text")) for m in slack_api.thread("C0CHAN0001", ts)
        ]
    print("\nrecorder saw:", recorder.seen, "\nreplies:", replies)
    assert not recorder.with_token(SLACK_TOKEN), recorder.with_token(SLACK_TOKEN)
    assert any("notes.txt" in r for r in replies), replies  # the person is told which file


# -- Slack: the surface, a scheme downgrade ----------------------------------------------------


async def test_slack_sends_no_token_over_http_when_the_api_is_https(recorder: Recorder) -> None:
    """The API configured as https on a host and port; the file URL is http on the same."""
    api_url = f"https://127.0.0.1:{recorder.port}/api/"
    client = AsyncWebClient(token=SLACK_TOKEN, base_url=api_url)
    surface = SlackSurface(client, SLACK_TOKEN, api_url=api_url, max_file_bytes=1_000_000)
    url = f"http://127.0.0.1:{recorder.port}/files-pri/T0TEAM0001-F0FILE0001/notes.txt"
    try:
        with pytest.raises(DeliveryError) as refused:
            got = await surface.download(Attachment(name="notes.txt", url=url), 1_000_000)
            pytest.fail(f"downloaded {got!r} with the token over http")
    finally:
        await surface.close()
    print("\nrecorder saw:", recorder.seen)
    assert not recorder.with_token(SLACK_TOKEN), recorder.with_token(SLACK_TOKEN)
    assert refused.value.permanent and "notes.txt" in str(refused.value)


async def test_slack_still_downloads_from_the_api_origin(recorder: Recorder) -> None:
    """The control: the configured API's own scheme, host and port get the token (also when
    the URL spells its default port and the API's does not, or the other way round)."""
    api_url = f"http://127.0.0.1:{recorder.port}/api/"
    client = AsyncWebClient(token=SLACK_TOKEN, base_url=api_url)
    surface = SlackSurface(client, SLACK_TOKEN, api_url=api_url, max_file_bytes=1_000_000)
    url = f"HTTP://127.0.0.1:{recorder.port}/files-pri/T0TEAM0001-F0FILE0002/notes.txt"
    try:
        got = await surface.download(Attachment(name="notes.txt", url=url), 1_000_000)
    finally:
        await surface.close()
    assert got == b"the file"
    assert [s.authorization for s in recorder.seen] == [f"Bearer {SLACK_TOKEN}"]


@pytest.mark.parametrize(
    ("url", "api_url", "allowed"),
    [
        ("https://files.slack.com/files-pri/T1-F1/x", "https://slack.com/api/", True),
        ("https://files.slack.com:443/files-pri/T1-F1/x", "https://slack.com/api/", True),
        ("https://files.slack.com:8443/files-pri/T1-F1/x", "https://slack.com/api/", False),
        ("http://files.slack.com/files-pri/T1-F1/x", "https://slack.com/api/", False),
        ("http://slack.com/files-pri/T1-F1/x", "https://slack.com/api/", False),
        ("https://slack.com:8080/files-pri/T1-F1/x", "https://slack.com/api/", False),
        ("https://slack.com.evil.example/x", "https://slack.com/api/", False),
        ("https://files.slack.com@evil.example/x", "https://slack.com/api/", False),
        ("https://proxy.example/files/x", "https://proxy.example/api/", True),
        ("https://proxy.example:443/files/x", "https://proxy.example/api/", True),
        ("https://proxy.example/files/x", "https://proxy.example:443/api/", True),
        ("http://proxy.example/files/x", "https://proxy.example/api/", False),
        ("https://proxy.example:8443/files/x", "https://proxy.example/api/", False),
        ("http://proxy.example:80/files/x", "http://proxy.example/api/", True),
        ("ftp://files.slack.com/x", "https://slack.com/api/", False),
        ("https://files.slack.com:notaport/x", "https://slack.com/api/", False),
    ],
)
def test_where_the_slack_token_may_go(url: str, api_url: str, allowed: bool) -> None:
    surface = SlackSurface(
        AsyncWebClient(token=SLACK_TOKEN, base_url=api_url),
        SLACK_TOKEN,
        api_url=api_url,
        max_file_bytes=1_000_000,
    )
    assert surface._may_send_token(url) is allowed


# -- Telegram: the file URL the Bot API names --------------------------------------------------


@pytest.fixture
def tg_env(
    tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int], bot_api: FakeBotApi
) -> Iterator[dict[str, str]]:
    yield gateway_env(
        tmp_path / "root",
        fake_dir,
        uid_range,
        JAZZ_BRIDGE_WEB__ENABLED="false",
        JAZZ_BRIDGE_TELEGRAM__TOKEN=TG_TOKEN,
        JAZZ_BRIDGE_TELEGRAM__API_URL=bot_api.api_url,
        JAZZ_BRIDGE_TELEGRAM__WEBHOOK_URL="https://bridge.example/telegram/webhook",
        JAZZ_BRIDGE_TELEGRAM__WEBHOOK_SECRET=TG_SECRET,
        JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE="true",
        JAZZ_BRIDGE_TELEGRAM__MIN_SEND_INTERVAL_S="0",
    )
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def deliver_telegram(port: int, update: dict[str, Any]) -> int:
    headers = {"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": TG_SECRET}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"http://127.0.0.1:{port}/telegram/webhook", data=json.dumps(update), headers=headers
        ) as r,
    ):
        return r.status


@needs_root
async def test_telegram_sends_no_token_to_a_url_the_bot_api_names(
    tg_env: dict[str, str], bot_api: FakeBotApi, recorder: Recorder
) -> None:
    """``getFile`` answers with URLs of the API's host on another port (full, and
    scheme-relative), each with the token in its path as Telegram's own file URLs have."""
    paths = {
        "full": f"http://127.0.0.1:{recorder.port}/file/bot{TG_TOKEN}/documents/a.pdf",
        "scheme-relative": f"//127.0.0.1:{recorder.port}/file/bot{TG_TOKEN}/documents/b.pdf",
        "no-scheme": f"127.0.0.1:{recorder.port}/file/bot{TG_TOKEN}/documents/c.pdf",
    }
    for file_id, path in paths.items():
        bot_api.add_file(file_id, path, b"%PDF never to be fetched elsewhere")
    async with running_gateway(tg_env) as (app, _client):
        for i, file_id in enumerate(paths):
            document = {
                "file_id": file_id,
                "file_unique_id": f"u{file_id}",
                "file_name": f"{file_id}.pdf",
                "mime_type": "application/pdf",
            }
            person = {"id": ADA, "is_bot": False, "first_name": "Ada"}
            update = {
                "update_id": 750000001 + i,
                "message": {
                    "message_id": 700 + i,
                    "from": person,
                    "chat": {"id": ADA, "type": "private", "first_name": "Ada"},
                    "date": int(time.time()),
                    "document": document,
                    "caption": f"read {file_id}",
                },
            }
            assert await deliver_telegram(app.port, update) == 200

        def answered() -> int:
            return len(
                [c for c in bot_api.called("sendMessage") if int(c.params["chat_id"]) == ADA]
            )

        await wait_until(lambda: answered() >= len(paths), 40, "an answer to every document")
    print("\nrecorder saw:", recorder.seen)
    assert not recorder.with_token(TG_TOKEN), recorder.with_token(TG_TOKEN)
