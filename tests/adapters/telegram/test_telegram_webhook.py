"""Telegram's webhook and the adapter's start (adapters/telegram/adapter.py): the real PTB
client and the real gateway against a fake Bot API. The webhook is set with its secret
(again, if Telegram refused it at start), refuses a wrong or missing secret and what is no
update, runs a redelivered update once; the bot's command list is sent only when it
changed; the allowlists are required and applied; and the bot token (in every Bot API URL)
is never shown by the gateway's own endpoints."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

import aiohttp
import pytest
from tg_support import (
    ADA,
    BOT,
    GRACE,
    GROUP,
    GROUP_CHAT,
    SECRET,
    TOKEN,
    FakeBotApi,
    post,
    press,
    running_gateway,
    sample,
    sent_to,
    stored,
    vector,
    wait_sent,
    wait_until,
)

from bridge.model import InboxState

# PTB 22 itself warns when it builds a RetryAfter (its type becomes timedelta in v23)
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


async def test_a_webhook_telegram_refused_at_start_is_set_again(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    """setWebhook failed at start (a 5xx): until it is set Telegram delivers nothing, so it
    is tried again (the failure in /healthz meanwhile) instead of waiting for a restart."""
    fake.fail("setWebhook", "5xx")
    async with running_gateway(env) as (app, _client):
        await wait_until(lambda: bool(fake.webhook_url), 15, "the webhook set on a later try")
        assert fake.called("setWebhook", ok=False)
        assert fake.webhook_url == env["JAZZ_BRIDGE_TELEGRAM__WEBHOOK_URL"]
        (telegram,) = [a for a in app.adapters if a.name == "telegram"]
        assert telegram.health() is None


async def test_webhook_refuses_a_wrong_or_missing_secret_and_bad_json(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env) as (app, _client):
        assert await post(app.port, vector("private_message"), secret=None) == 403
        assert await post(app.port, vector("private_message"), secret="wrong") == 403
        assert (
            sample(app, "jazz_bridge_auth_failures_total", platform="telegram", reason="secret")
            == 2
        )
        assert await stored(app) == 0
        assert await post(app.port, None, raw=b"{not json") == 400
        assert await post(app.port, [1, 2]) == 400  # JSON, but not an update
        assert await post(app.port, {"update_id": "seven", "message": {}}) == 400
        assert await stored(app) == 0
        assert not fake.called("sendMessage")
        # the webhook was set with the secret at start, for the updates the adapter reads
        (hook,) = fake.called("setWebhook")
        assert hook.params["secret_token"] == SECRET
        assert hook.params["url"] == env["JAZZ_BRIDGE_TELEGRAM__WEBHOOK_URL"]
        assert set(hook.params["allowed_updates"]) == {
            "message",
            "edited_message",
            "callback_query",
        }
        assert not fake.called("getUpdates")
        # and the right secret is let in
        assert await post(app.port, vector("private_message")) == 200
        assert await stored(app) == 1


async def test_private_message_runs_once_even_when_redelivered(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env) as (app, _client):
        body = vector("private_message")
        # Telegram redelivers an update whose 200 it did not see, even while the first runs
        first = await asyncio.gather(post(app.port, body), post(app.port, body))
        assert first == [200, 200]
        (answer,) = await wait_sent(fake, ADA, "calendar")
        assert "reference runner" in answer.params["text"].lower()
        assert answer.params.get("entities")  # Markdown went out as entities
        await wait_until(
            lambda: sample(app, "jazz_bridge_runs_total", outcome="ok") == 1, 20, "one run"
        )
        assert await post(app.port, body) == 200  # and again after it ran
        assert (
            sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="duplicate") == 2
        )
        assert sample(app, "jazz_bridge_runs_total", outcome="ok") == 1
        assert len(await app.store.messages_in_state(InboxState.DONE)) == 1
        assert len([c for c in sent_to(fake, ADA) if "calendar" in c.params["text"]]) == 1


async def test_set_my_commands_only_when_the_list_changed(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    async with running_gateway(env):
        pass
    async with running_gateway(env) as (app, _client):
        assert len(fake.called("setMyCommands")) == 1  # the same list: not sent again
        # as after an upgrade that changed the list: the stored digest no longer matches
        await app.store.set_kv(f"telegram:{BOT}:commands-sha256", "an older list")
    async with running_gateway(env):
        pass
    assert len(fake.called("setMyCommands")) == 2
    assert len(fake.called("setWebhook")) == 3
    names = [c["command"] for c in fake.called("setMyCommands")[-1].params["commands"]]
    assert names == ["start", "help", "new", "status", "stop"]


async def test_allowlist_and_configuration_errors(env: dict[str, str], fake: FakeBotApi) -> None:
    from bridge.errors import AdapterError

    no_list = dict(env, JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE="false")
    with pytest.raises(AdapterError, match="allowlist") as refused:
        async with running_gateway(no_list):
            pass
    for key in ("telegram.allowed_chats", "telegram.allowed_users", "telegram.allow_everyone"):
        assert key in str(refused.value)
    assert not fake.called("setWebhook")  # refused before it took any update
    no_secret = {k: v for k, v in env.items() if k != "JAZZ_BRIDGE_TELEGRAM__WEBHOOK_SECRET"}
    with pytest.raises(AdapterError, match=r"telegram\.webhook_secret"):
        async with running_gateway(no_secret):
            pass
    only_ada = dict(no_list, JAZZ_BRIDGE_TELEGRAM__ALLOWED_USERS=f"[{ADA}]")
    async with running_gateway(only_ada) as (app, _client):
        assert await post(app.port, vector("group_mention")) == 200  # Grace: not allowed
        assert sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="denied") == 1
        assert await stored(app) == 0
        # her button presses are answered (the button would spin) but do nothing
        assert await post(app.port, press(730000801, GRACE, GROUP_CHAT, "some-token.y")) == 200
        (toast,) = fake.called("answerCallbackQuery")
        assert toast.params["show_alert"] is True and "not allowed" in toast.params["text"]
        assert sample(app, "jazz_bridge_messages_total", platform="telegram", outcome="denied") == 2
        assert await post(app.port, vector("private_message")) == 200
        await wait_sent(fake, ADA, "calendar")
        assert not sent_to(fake, GROUP)
    # a chat on the list lets in everyone in it
    ops_chat = dict(no_list, JAZZ_BRIDGE_TELEGRAM__ALLOWED_CHATS=f"[{GROUP}]")
    async with running_gateway(ops_chat) as (app, _client):
        assert await post(app.port, vector("group_mention")) == 200
        await wait_sent(fake, GROUP, "check the backup logs")


class Forwarder:
    """A TCP forwarder to the fake Bot API that can be *frozen*: its open connections are cut
    and it stops accepting, with its accept queue full, so a new connection hangs in the
    handshake (as behind a firewall that drops packets, or a Bot API host that is down)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)
        self.sock.setblocking(False)
        self.port = int(self.sock.getsockname()[1])
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._fillers: list[socket.socket] = []
        self._acceptor: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._acceptor = asyncio.create_task(self._accept())

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(self.sock)
            task = asyncio.create_task(self._serve(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, conn: socket.socket) -> None:
        c_reader, c_writer = await asyncio.open_connection(sock=conn)
        u_reader, u_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers += [c_writer, u_writer]

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            with contextlib.suppress(Exception):
                w.close()

        await asyncio.gather(pipe(c_reader, u_writer), pipe(u_reader, c_writer))

    async def freeze(self) -> None:
        assert self._acceptor is not None
        self._acceptor.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._acceptor
        for w in self._writers:
            with contextlib.suppress(Exception):
                w.transport.abort()
        for _ in range(3):  # fill the accept queue: later handshakes are not answered
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", self.port))
            self._fillers.append(filler)

    async def close(self) -> None:
        if self._acceptor is not None and not self._acceptor.done():
            self._acceptor.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for w in self._writers:
            with contextlib.suppress(Exception):
                w.transport.abort()
        for s in [*self._fillers, self.sock]:
            s.close()


async def test_healthz_never_shows_the_bot_token(env: dict[str, str], fake: FakeBotApi) -> None:
    """The Bot API host stops answering handshakes while the gateway polls: /healthz says
    Telegram is down (503), and must say so without the bot token in its body."""
    del env["JAZZ_BRIDGE_TELEGRAM__WEBHOOK_URL"]
    env["JAZZ_BRIDGE_TELEGRAM__POLL_TIMEOUT_S"] = "1"
    forwarder = Forwarder(fake.port)
    forwarder.start()
    env["JAZZ_BRIDGE_TELEGRAM__API_URL"] = f"http://127.0.0.1:{forwarder.port}/bot"
    try:
        async with running_gateway(env) as (app, _client):
            await wait_until(lambda: bool(fake.called("getUpdates")), 10, "polling started")
            await forwarder.freeze()
            (telegram,) = [a for a in app.adapters if a.name == "telegram"]
            await wait_until(
                lambda: "in time" in (telegram.health() or ""), 30, "a connect timeout noted"
            )
            async with (
                aiohttp.ClientSession() as s,
                s.get(f"http://127.0.0.1:{app.port}/healthz") as r,
            ):
                status, body = r.status, await r.text()
            assert status == 503
            assert TOKEN not in body, f"/healthz shows the bot token: {body}"
    finally:
        await forwarder.close()
