"""The Slack adapter: bolt's ``AsyncApp`` on the gateway's aiohttp server, or Socket Mode.

Intake over HTTP: :mod:`.routes` checks the signature (raw bytes, constant time, Slack's
5-minute window, :mod:`.guard`) and the body's shape first. A message event
(``event_callback``) is then converted to an :class:`~bridge.model.Inbound` and handed to
``gateway.submit`` directly (:mod:`.intake`): bolt's dispatch would add only a per-request
Web API client, middleware and matchers around the same converter. Everything else
(``url_verification``, button presses, ``/jazz``) goes through bolt, and so does everything
in Socket Mode, where the same converter takes events (``process_before_response=True``).
Either way Slack's 2xx comes after the inbox write; a refusal (the gateway is stopping)
answers 503, a store that cannot write 507/503 (the server's middleware), so Slack delivers
again. The dedupe key is the message's channel and ``ts``, not the envelope's
``event_id``: a redelivery is acked and never runs twice, and neither does one message
Slack sends as two events (``message.im`` and ``app_mention``). Button presses
(:mod:`.presses`) are acked at once and answered in a tracked task; ``/jazz`` is
:mod:`.command`'s.

This module is the lifecycle around those parts: the Web API session, bolt's app and its
listeners, ``auth.test`` at start, Socket Mode's connection, and the adapter's health.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bridge import rules
from bridge.errors import AdapterError
from bridge.http.server import gate_bodies
from bridge.ports import AdapterContext, SubmitStatus

from .access import PLATFORM, Access
from .command import SlashCommand
from .intake import EventIntake
from .presses import Presses
from .routes import EVENTS_PATH, REFUSED, EventsRoute
from .spec import SLASH_COMMAND, SlackSettings, check
from .surface import SlackSurface

log = logging.getLogger(__name__)

SOCKET_CONNECT_CALLS = 2  # Socket Mode gets this many api_timeout_s to connect at start
# auth.test errors that say the bot token itself is no good (wrong, revoked, uninstalled)
REJECTED_TOKEN = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired"}
)


class SlackAdapter:
    name = PLATFORM

    def __init__(self, ctx: AdapterContext) -> None:
        self.ctx = ctx
        self.settings: SlackSettings = ctx.settings
        s = self.settings
        token = s.bot_token.get_secret_value() if s.bot_token else ""
        # retry_handlers=[]: slack_sdk's default retries a request whose connection dropped,
        # which for chat.postMessage is a blind resend; the surface decides what to retry.
        self.client = AsyncWebClient(
            token=token, base_url=s.api_url, timeout=s.api_timeout_s, retry_handlers=[]
        )
        self.surface = SlackSurface(
            self.client, token, api_url=s.api_url, max_file_bytes=s.max_file_bytes
        )
        access = Access.of(s)
        self._intake = EventIntake(ctx, access, self.surface)
        self._presses = Presses(ctx, access, self.surface, self.client)
        self._command = SlashCommand(ctx, access)
        self._routes = EventsRoute(ctx, self._intake)
        self._app: AsyncApp | None = None
        self._socket: Any = None  # AsyncSocketModeHandler, imported only in socket mode
        self._down: str | None = None
        self._http: aiohttp.ClientSession | None = None  # the Web API client's connections

    # -- lifecycle ----------------------------------------------------------------------------

    async def initialize(self) -> None:
        s = self.settings
        # the spec's rules: serve applied them already, but no adapter opens without them
        rules.refuse(check(s, self.ctx.core))
        # One session for every Web API call: without one, slack_sdk opens a new session, so a
        # new connection and TLS handshake to slack.com, for each call (each answer, each
        # progress edit). Its timeout is the session's, as slack_sdk's own would have been.
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=s.api_timeout_s))
        self.client.session = self._http
        secret = s.signing_secret.get_secret_value() if s.signing_secret else ""
        app = AsyncApp(
            client=self.client,  # carries the bot token and api_url
            signing_secret=secret,
            process_before_response=True,  # the 2xx only after the inbox write
            # .routes checks the signature first (guard.signature_failure: the raw bytes,
            # constant time, Slack's 5-minute window, failures counted) and hands bolt only
            # requests that passed; bolt checking the same HMAC again was pure cost. Socket
            # mode has no signature (the socket is authenticated by the app token).
            request_verification_enabled=False,
            raise_error_for_unhandled_request=False,
            # our converter drops the bot's own messages itself, and counts them as ignored
            ignoring_self_events_enabled=False,
            logger=logging.getLogger("adapters.slack.bolt"),
        )
        app.event(re.compile(r".*"))(self._on_event)
        app.action(re.compile(r".*"))(self._presses.on_action)  # old buttons too: "expired"
        app.command(SLASH_COMMAND)(self._command.on_command)
        self._app = self._routes.app = app
        # here, before the gateway's recovery requeues anything: a start refused later would
        # stop the runs it had just begun
        try:
            auth = await self.client.auth_test()
            self._intake.bot_user_id = auth.get("user_id")
        except SlackApiError as exc:
            error = exc.response.get("error") if exc.response is not None else None
            if error in REJECTED_TOKEN:  # no answer could ever be posted: not a start
                raise AdapterError(
                    f"slack.bot_token was refused by Slack (auth.test: {error}): set a valid "
                    "xoxb- bot token of the installed app in slack.bot_token "
                    "(JAZZ_BRIDGE_SLACK__BOT_TOKEN)"
                ) from None
            log.warning("slack auth.test failed (replies may fail too): %s", exc)
        except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("slack auth.test failed (replies may fail too): %s", exc)

    async def start(self) -> None:
        if self.settings.mode == "socket":
            from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

            assert self._app is not None and self.settings.app_token is not None
            self._socket = AsyncSocketModeHandler(
                self._app, self.settings.app_token.get_secret_value(), web_client=self.client
            )
            # slack_sdk retries a refused or unreachable connection forever: bounded here,
            # so a revoked app token or an unreachable Slack is a clear start-up error
            limit = float(SOCKET_CONNECT_CALLS * self.settings.api_timeout_s)
            try:
                await asyncio.wait_for(self._socket.connect_async(), timeout=limit)
            except Exception as exc:
                why = f"no connection within {limit:.0f}s" if isinstance(exc, TimeoutError) else exc
                self._down = f"socket mode: {why}"
                with contextlib.suppress(Exception):
                    await self._socket.close_async()
                self._socket = None
                raise AdapterError(
                    f"slack socket mode could not connect: {why} (check slack.app_token, an "
                    "xapp- token with connections:write, and that Slack is reachable)"
                ) from exc

    async def stop(self) -> None:
        """Close intake (the socket), then let answers to button presses finish briefly."""
        if self._socket is not None:
            try:
                await self._socket.close_async()
            finally:
                self._socket = None
                self._down = "socket mode closed"
        await self._presses.drain()

    async def shutdown(self) -> None:
        await self.surface.close()
        if self._http is not None:
            await self._http.close()
            self._http = None

    def health(self) -> str | None:
        if self._down is None and self._socket is not None:
            session = getattr(self._socket.client, "current_session", None)
            if session is None or session.closed:  # slack_sdk is reconnecting
                return "socket mode: not connected"
        return self._down

    # -- HTTP ---------------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        if self.settings.mode == "http":  # socket mode receives nothing over HTTP
            app.router.add_post(EVENTS_PATH, self._routes.events)
            gate_bodies(app, EVENTS_PATH, self._routes.refusal)  # unsigned bodies are never read

    # -- bolt's listener for message events (Socket Mode; HTTP takes them in .routes) ----------

    async def _on_event(self, body: dict[str, Any], context: Any) -> BoltResponse | None:
        status = await self._intake.receive(body, getattr(context, "bot_user_id", None))
        if status is SubmitStatus.REFUSED:
            return BoltResponse(status=503, body=REFUSED)
        return None
