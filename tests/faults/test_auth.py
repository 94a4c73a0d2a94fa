"""Authentication at the gateway's doors: every refusal answered, counted, and never run.

The real gateway (in process) with Slack in HTTP mode, Telegram in webhook mode and the web
API behind a token, against the fake Slack Web API and the fake Bot API, the tests' fake
runner logging every run. Slack: wrong, missing, malformed and replayed-stale signatures,
a body changed after signing, a timestamp from the future; Telegram: a wrong, missing,
truncated or differently-cased secret; the web API: a wrong or missing token; all three
routes: a body over ``server.max_body_bytes`` (413, with and without a Content-Length).
Each is checked in ``/metrics`` as the operator sees it (``jazz_bridge_auth_failures_total``
by platform and reason), nothing is stored and nothing runs, while a correctly signed
request sent right after is accepted and runs (so the refusals are not an outage).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from accounts_support import needs_root, remove_accounts
from prometheus_client.parser import text_string_to_metric_families

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent

from fake_bot_api import FakeBotApi  # noqa: E402
from fake_slack_api import FakeSlackApi  # noqa: E402
from gateway_harness import Client, gateway_env, running_gateway, wait_until  # noqa: E402

from bridge.app import GatewayApp  # noqa: E402
from bridge.model import InboxState  # noqa: E402

pytestmark = [
    pytest.mark.faults,
    needs_root,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]

SLACK_SECRET = "0123456789abcdef0123456789abcdef"
SLACK_TOKEN = "xoxb-0000000000-test-token-for-the-fake"
TG_TOKEN = "999999999:AAtest-token_for-the-fake"
TG_SECRET = "s3cret-webhook_token"
WEB_TOKEN = "web-token-0123456789"
MAX_BODY = 64 * 1024
VECTORS = TESTS / "vectors"


def vector(platform: str, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((VECTORS / platform / f"{name}.json").read_text())
    return data


def slack_body(n: int, text: str) -> bytes:
    body = copy.deepcopy(vector("slack", "app_mention"))
    body["event_id"] = f"EvAuth{n:04d}"
    body["event"]["text"] = f"<@U0BOT00001> {text}"
    body["event"]["ts"] = body["event"]["event_ts"] = f"1764669600.{n:06d}"
    return json.dumps(body).encode()


def signature(body: bytes, ts: str, secret: str = SLACK_SECRET) -> str:
    base = b"v0:" + ts.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def signed(body: bytes, *, at: float | None = None, secret: str = SLACK_SECRET) -> dict[str, str]:
    ts = str(int(time.time() if at is None else at))
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": signature(body, ts, secret)}


def tg_body(update_id: int, text: str) -> bytes:
    body = copy.deepcopy(vector("telegram", "private_message"))
    body["update_id"] = update_id
    body["message"]["text"] = text
    return json.dumps(body).encode()


@pytest.fixture
def env(
    tmp_path: Path,
    fake_dir: Path,
    uid_range: tuple[int, int],
    fakes: tuple[FakeSlackApi, FakeBotApi],
) -> Iterator[dict[str, str]]:
    slack, bot = fakes
    yield gateway_env(
        tmp_path / "root",
        fake_dir,
        uid_range,
        JAZZ_BRIDGE_SERVER__MAX_BODY_BYTES=str(MAX_BODY),
        JAZZ_BRIDGE_WEB__TOKEN=WEB_TOKEN,
        JAZZ_BRIDGE_SLACK__BOT_TOKEN=SLACK_TOKEN,
        JAZZ_BRIDGE_SLACK__SIGNING_SECRET=SLACK_SECRET,
        JAZZ_BRIDGE_SLACK__API_URL=slack.api_url,
        JAZZ_BRIDGE_SLACK__ALLOW_EVERYONE="true",
        JAZZ_BRIDGE_TELEGRAM__TOKEN=TG_TOKEN,
        JAZZ_BRIDGE_TELEGRAM__API_URL=bot.api_url,
        JAZZ_BRIDGE_TELEGRAM__MODE="webhook",
        JAZZ_BRIDGE_TELEGRAM__WEBHOOK_SECRET=TG_SECRET,
        JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE="true",
        JAZZ_BRIDGE_TELEGRAM__MIN_SEND_INTERVAL_S="0",
    )
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


async def post(
    client: Client, path: str, body: bytes | Any, headers: dict[str, str]
) -> tuple[int, str]:
    async with client.session.post(client.base + path, data=body, headers=headers) as r:
        return r.status, await r.text()


async def raw_post(client: Client, path: str, body: bytes, header_line: bytes) -> int:
    """POST with one header line sent as raw bytes; the status code of the answer."""
    host, port = client.base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            b"POST " + path.encode() + b" HTTP/1.1\r\nHost: " + host.encode() + b"\r\n"
            b"Content-Type: application/json\r\nConnection: close\r\n"
            + header_line
            + b"\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 30)
        return int(status_line.split()[1])
    finally:
        writer.close()


async def scraped(client: Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``/metrics`` as a scraper reads it: (sample name, sorted labels) -> value."""
    async with client.session.get(client.base + "/metrics") as r:
        assert r.status == 200
        text = await r.text()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def failures(
    metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], platform: str
) -> dict[str, float]:
    return {
        dict(labels)["reason"]: value
        for (name, labels), value in metrics.items()
        if name == "jazz_bridge_auth_failures_total" and dict(labels)["platform"] == platform
    }


async def inbox(app: GatewayApp) -> list[str]:
    """Every stored inbound message, as "platform event-id: text" (for failure messages).

    Read state by state while messages move on, so one may show twice: keyed by its id.
    """
    assert app.store is not None
    found = {
        m.id: f"{m.platform} {m.event_id}: {m.text[:40]}"
        for state in InboxState
        for m in await app.store.messages_in_state(state)
    }
    return sorted(found.values())


async def test_slack_signatures_wrong_missing_stale_and_tampered_are_refused_counted_not_run(
    env: dict[str, str],
) -> None:
    json_type = {"Content-Type": "application/json"}
    now = time.time()
    async with running_gateway(env) as (app, client):
        body = slack_body(1, "never run")
        cases: list[tuple[str, dict[str, str], bytes]] = [
            ("signature", signed(body, secret="f" * 32), body),  # wrong secret
            ("signature", {**signed(body), "X-Slack-Signature": "v0=" + "0" * 64}, body),
            ("signature", {**signed(body), "X-Slack-Signature": "v1=garbage"}, body),
            ("signature", signed(body), slack_body(2, "changed after signing")),
            ("missing", {}, body),  # neither header
            ("missing", {"X-Slack-Signature": signed(body)["X-Slack-Signature"]}, body),
            ("missing", {"X-Slack-Request-Timestamp": str(int(now))}, body),
            ("missing", {"X-Slack-Request-Timestamp": "soon", "X-Slack-Signature": "v0=1"}, body),
            # no Slack timestamp: 400 digits (its distance from now overflows a float), and
            # digits that are not ASCII
            (
                "missing",
                {"X-Slack-Request-Timestamp": "1" * 400, "X-Slack-Signature": "v0=1"},
                body,
            ),
            (
                "missing",
                {"X-Slack-Request-Timestamp": "\uff11" * 10, "X-Slack-Signature": "v0=1"},
                body,
            ),
            # a request captured six minutes ago and replayed now: correctly signed, stale
            ("stale", signed(body, at=now - 6 * 60), body),
            ("stale", signed(body, at=now + 10 * 60), body),  # from the future
        ]
        for reason, headers, sent in cases:
            status, text = await post(client, "/slack/events", sent, {**json_type, **headers})
            assert status == 401, (reason, headers, text)
        counted = failures(await scraped(client), "slack")
        assert counted == {"signature": 4, "missing": 6, "stale": 2}, counted
        assert len(await inbox(app)) == 0, await inbox(app)

        # a correct signature right after: accepted and run (the refusals were not an outage)
        ok = slack_body(3, "the one that runs")
        assert (await post(client, "/slack/events", ok, {**json_type, **signed(ok)}))[0] == 200
        await wait_until(lambda: len(client.starts()) == 1, 30, "the signed message's run")
        # the same request replayed inside the window: acknowledged, stored once, run once
        assert (await post(client, "/slack/events", ok, {**json_type, **signed(ok)}))[0] == 200
        metrics = await scraped(client)
        key = ("jazz_bridge_messages_total", (("outcome", "duplicate"), ("platform", "slack")))
        assert metrics[key] == 1
        assert len(await inbox(app)) == 1, await inbox(app)
        assert failures(metrics, "slack") == counted  # nothing more refused
        runs = client.starts()
        assert len(runs) == 1 and "the one that runs" in runs[0]["prompt"]
        assert all("never run" not in r["prompt"] for r in client.runs() if "prompt" in r)


async def test_telegram_secret_wrong_missing_or_near_is_refused_counted_not_run(
    env: dict[str, str],
) -> None:
    json_type = {"Content-Type": "application/json"}
    async with running_gateway(env) as (app, client):
        header = "X-Telegram-Bot-Api-Secret-Token"
        wrong = [
            {},  # missing
            {header: ""},
            {header: "wrong"},
            {header: TG_SECRET[:-1]},  # a prefix
            {header: TG_SECRET + "x"},
            {header: TG_SECRET.upper()},
        ]
        for n, headers in enumerate(wrong):
            status, _ = await post(
                client, "/telegram/webhook", tg_body(100 + n, "never run"), {**json_type, **headers}
            )
            assert status == 403, headers
        # a secret header whose bytes are not UTF-8 (sent raw, as a client library would not)
        raw_status = await raw_post(
            client, "/telegram/webhook", tg_body(150, "never run"), header.encode() + b": \xff\xfe"
        )
        assert raw_status == 403
        assert failures(await scraped(client), "telegram") == {"secret": len(wrong) + 1}
        assert len(await inbox(app)) == 0, await inbox(app)

        ok = {**json_type, header: TG_SECRET}
        assert (await post(client, "/telegram/webhook", tg_body(200, "runs"), ok))[0] == 200
        await wait_until(lambda: len(client.starts()) == 1, 30, "the run of the right secret")
        assert len(await inbox(app)) == 1, await inbox(app)
        assert all("never run" not in r["prompt"] for r in client.starts())


async def test_bodies_over_the_limit_are_413_on_every_route_counted_not_run(
    env: dict[str, str],
) -> None:
    big_text = "x" * (MAX_BODY + 1024)
    async with running_gateway(env) as (app, client):
        slack = slack_body(9, big_text)
        tg = tg_body(900, big_text)
        web = json.dumps({"user": "ada", "text": big_text}).encode()
        bearer = {"Authorization": f"Bearer {WEB_TOKEN}"}
        requests: list[tuple[str, bytes, dict[str, str]]] = [
            ("/slack/events", slack, signed(slack)),
            ("/telegram/webhook", tg, {"X-Telegram-Bot-Api-Secret-Token": TG_SECRET}),
            ("/api/threads/auth/messages", web, bearer),
        ]
        for path, body, headers in requests:
            headers = {"Content-Type": "application/json", **headers}
            assert (await post(client, path, body, headers))[0] == 413, path

            async def chunks(data: bytes = body) -> AsyncIterator[bytes]:
                for i in range(0, len(data), 8192):
                    yield data[i : i + 8192]

            # no Content-Length (chunked): refused while reading, all the same
            status, _ = await post(client, path, chunks(), headers)
            assert status == 413, f"{path} (chunked)"
        metrics = await scraped(client)
        for platform in ("slack", "telegram", "web"):
            assert failures(metrics, platform) == {"too_big": 2}, platform

        # the web API's token: wrong or missing is 401 and counted
        web_ok = json.dumps({"user": "ada", "text": "web runs"}).encode()
        path = "/api/threads/auth/messages"
        json_type = {"Content-Type": "application/json"}
        assert (await post(client, path, web_ok, json_type))[0] == 401
        assert (await post(client, path, web_ok, {**json_type, "Authorization": "Bearer no"}))[
            0
        ] == 401
        not_utf8 = await raw_post(client, path, web_ok, b"Authorization: Bearer \xff\xfe")
        assert not_utf8 == 401
        assert failures(await scraped(client), "web") == {"too_big": 2, "token": 3}
        assert len(await inbox(app)) == 0, await inbox(app)
        assert client.starts() == []

        # just under the limit on each route is accepted and runs
        small = "y" * 1000
        ok_slack = slack_body(10, small)
        ok_requests: list[tuple[str, bytes, dict[str, str]]] = [
            ("/slack/events", ok_slack, signed(ok_slack)),
            (
                "/telegram/webhook",
                tg_body(901, small),
                {"X-Telegram-Bot-Api-Secret-Token": TG_SECRET},
            ),
            (path, json.dumps({"user": "ada", "text": small}).encode(), bearer),
        ]
        for p, body, headers in ok_requests:
            status, text = await post(client, p, body, {**json_type, **headers})
            assert status in (200, 202), (p, status, text)
        await wait_until(lambda: len(client.starts()) == 3, 30, "the three small messages' runs")
        assert len(await inbox(app)) == 3, await inbox(app)


async def open_body(client: Client, path: str, headers: dict[str, str], length: int) -> Any:
    """A POST whose headers are sent, with a first byte of its ``length``-byte body and no
    more (a slow client): the open connection's (reader, writer)."""
    host, port = client.base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"{lines}Content-Length: {length}\r\n\r\n{{".encode()
    )
    await writer.drain()
    return reader, writer


async def status_within(reader: Any, seconds: float = 5.0) -> int:
    """The status of the answer, which must come before ``seconds`` (not after the 30 s a
    body is given to arrive)."""
    line = await asyncio.wait_for(reader.readline(), seconds)
    return int(line.split()[1])


async def test_a_body_is_not_waited_for_before_the_headers_prove_the_sender(
    env: dict[str, str],
) -> None:
    """Every route buffered up to server.max_body_bytes before its credential was looked
    at: an unauthenticated client declaring a large body and sending it slowly held it
    (and its memory) for 30 s. What the headers prove is now checked first: refused at
    once, the body never read."""
    refusals = [
        ("/telegram/webhook", {"X-Telegram-Bot-Api-Secret-Token": "wrong"}, 403),
        ("/telegram/webhook", {}, 403),
        ("/slack/events", {}, 401),  # no signature headers
        ("/slack/events", signed(b"x", at=time.time() - 3600), 401),  # stale
        ("/api/threads/t/messages", {"Authorization": "Bearer wrong"}, 401),
        ("/api/threads/t/messages", {}, 401),
    ]
    async with running_gateway(env) as (_, client):
        for path, headers, status in refusals:
            reader, writer = await open_body(client, path, headers, MAX_BODY - 1)
            try:
                assert await status_within(reader) == status, (path, headers)
            finally:
                writer.close()
        assert client.starts() == []


async def test_bodies_read_at_once_are_bounded_in_bytes_and_per_peer(
    env: dict[str, str],
) -> None:
    """Authenticated or not, 1,200 slow bodies took the gateway from 0.4 to 1.55 GB: the
    bodies being read at once now hold at most server.max_buffered_bytes together (a
    request beyond is answered 503 with Retry-After at once), and one peer may have at most
    server.max_requests_per_peer requests under way (429)."""
    env["JAZZ_BRIDGE_SERVER__MAX_BUFFERED_BYTES"] = str(2 * MAX_BODY + 1000)
    env["JAZZ_BRIDGE_SERVER__MAX_REQUESTS_PER_PEER"] = "3"
    secret = {"X-Telegram-Bot-Api-Secret-Token": TG_SECRET}
    async with running_gateway(env) as (_, client):
        held = [await open_body(client, "/telegram/webhook", secret, MAX_BODY) for _ in range(2)]
        try:
            reader, writer = await open_body(client, "/telegram/webhook", secret, MAX_BODY)
            try:
                assert await status_within(reader) == 503  # no room for a third body
                headers = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                assert b"Retry-After: 1" in headers
            finally:
                writer.close()
            # a small one fits beside them, and fills this peer's three
            small = await open_body(client, "/telegram/webhook", secret, 100)
            held.append(small)
            reader, writer = await open_body(client, "/telegram/webhook", secret, 100)
            try:
                assert await status_within(reader) == 429
            finally:
                writer.close()
        finally:
            for _, w in held:
                w.close()
        # the room is given back: a whole update is taken again
        status, text = await post(
            client,
            "/telegram/webhook",
            tg_body(990, "after"),
            {**secret, "Content-Type": "application/json"},
        )
        assert status == 200, text


async def healthz_on(reader: Any, writer: Any) -> int:
    """GET /healthz on an open connection (closed after); the status of the answer."""
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n")
    await writer.drain()
    status = await status_within(reader)
    await asyncio.wait_for(reader.read(), 5)  # to its end: the gateway closed it
    return status


async def test_connections_beyond_a_peers_limit_are_refused_before_a_byte_is_read(
    env: dict[str, str],
) -> None:
    """One address could open connections without end, each holding a descriptor of the
    gateway whether it sent anything or not. Beyond server.max_connections_per_peer it is
    answered 429 and closed at once; its open ones and other addresses are served, and a
    connection that closes gives its place back."""
    env["JAZZ_BRIDGE_SERVER__MAX_CONNECTIONS_PER_PEER"] = "4"
    async with running_gateway(env) as (_, client):
        host, port = client.base.removeprefix("http://").split(":")

        async def connect() -> Any:  # from another loopback address than the test's client
            return await asyncio.open_connection(host, int(port), local_addr=("127.0.0.2", 0))

        held = [await connect() for _ in range(4)]  # silent: not a byte sent
        try:
            reader, writer = await connect()
            try:
                assert await status_within(reader) == 429
                rest = await asyncio.wait_for(reader.read(), 5)  # and closed
                assert b"Retry-After: 1" in rest and b"max_connections_per_peer" in rest
            finally:
                writer.close()
            async with client.session.get(client.base + "/healthz") as r:
                assert r.status == 200  # another address is served meanwhile
            assert await healthz_on(*held.pop(0)) == 200  # so are the peer's open ones
            assert await healthz_on(*await connect()) == 200  # the closed one's place
        finally:
            for _, w in held:
                w.close()
        assert failures(await scraped(client), "http")["connections"] == 1
