"""The Slack adapter: bolt's ``AsyncApp`` on the gateway's aiohttp server, or Socket Mode.

Intake over HTTP: :mod:`.guard` checks the signature (raw bytes, constant time, Slack's
5-minute window) and the body's shape first. A message event (``event_callback``) is then
converted to an :class:`~bridge.model.Inbound` and handed to ``gateway.submit`` directly:
bolt's dispatch would add only a per-request Web API client, middleware and matchers around
the same converter. Everything else (``url_verification``, button presses, ``/jazz``) goes
through bolt, and so does everything in Socket Mode, where the same listener converts events
(``process_before_response=True``). Either way Slack's 2xx comes after the inbox write; a
refusal (the gateway is stopping) answers 503, a store that cannot write 507/503 (the
server's middleware), so Slack delivers again. The dedupe key is the message's channel
and ``ts``, not the envelope's ``event_id``: a redelivery is acked and never runs twice, and
neither does one message Slack sends as two events (``message.im`` and ``app_mention``).
Button presses are acked at once and answered in a tracked task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bridge import rules
from bridge.errors import AdapterError
from bridge.http.server import gate_bodies
from bridge.model import Attachment, Inbound, Outgoing, ReplyTarget
from bridge.ports import AdapterContext, DeliveryError, SubmitStatus
from bridge.presses import NOT_ALLOWED_TEXT, PRESS_FAILED_TEXT, MessageChange, press_plan
from bridge.store import StoreError, StoreFull

from . import guard
from .spec import SLASH_COMMAND, SlackSettings, check
from .surface import SlackSurface

log = logging.getLogger(__name__)

PLATFORM = "slack"
SOCKET_CONNECT_CALLS = 2  # Socket Mode gets this many api_timeout_s to connect at start
EVENTS_PATH = "/slack/events"
# auth.test errors that say the bot token itself is no good (wrong, revoked, uninstalled)
REJECTED_TOKEN = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired"}
)
PERSON_SUBTYPES = frozenset({"file_share", "thread_broadcast"})
CHECK_FILE_INFO = "check_file_info"  # a file sent with only its id: files.info has the rest
THREAD_COMMANDS = re.compile(r"^\s*!(new|status|stop|help)(?=\s|$)", re.IGNORECASE)
SLASH_COMMANDS = frozenset({"new", "status", "stop"})
MAX_FORWARDS = 10  # forwarded/shared messages quoted into one prompt
SLACK_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")  # U0123ABC, C0123ABC, T0123ABC, 1764669600.000100
SLASH_HELP = (
    "Mention me in a channel to start a conversation in a thread; in the thread write "
    "`!new`, `!status`, `!stop` or `!help` (Slack has no slash commands in threads). "
    "`/jazz new|status|stop` in a channel acts on its most recently active conversation "
    "(in a DM, on the DM's own), and `/jazz new <message>` starts the fresh one with it; "
    "`/jazz help` shows this."
)
# said only to the person (an ephemeral message, a command's ack), as Telegram's alert says it
NOT_STORED_FULL = "The gateway's disk is full: this was NOT stored or done; send it again later."
NOT_STORED = "The gateway cannot store this right now: it was NOT done; send it again."


@dataclass(frozen=True)
class PressAnswer:
    """How a button press is answered on Slack, after the ack: the pressed message edited
    to how the press left it, and/or a word to the presser only (an ephemeral message)."""

    target: ReplyTarget  # the pressed message's workspace (its chat.update budget)
    ref: str | None = None  # the pressed message, when it is to be edited
    resolved: Outgoing | None = None  # what it then shows: no buttons left in it
    stale: bool = False  # its run is over: an edit of it already coming is newer
    ephemeral: dict[str, Any] | None = None  # chat.postEphemeral's arguments


def _text(raw: str, bot_user_id: str | None) -> str:
    """The prompt: the bot's mention removed, Slack's three escapes undone."""
    if bot_user_id:
        raw = re.sub(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>", "", raw)
    text = _unescape(raw).strip()
    match = THREAD_COMMANDS.match(text)
    if match:  # Slack keeps slash commands out of threads: "!new" means the core's "/new"
        text = "/" + text.lstrip()[1:]
    return text


def _unescape(raw: str) -> str:
    return raw.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _escape(plain: str) -> str:
    return plain.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _blocks_text(blocks: Any) -> str:
    """A message's rich-text blocks as Slack's escaped ``text`` would read: the words when
    ``text`` came empty (the blocks are what the person wrote), mentions as ``<@U…>``."""
    lines = []
    for block in blocks if isinstance(blocks, list) else []:
        if isinstance(block, dict) and block.get("type") == "rich_text":
            lines += [_rich_line(part) for part in _list(block.get("elements"))]
    return "\n".join(line for line in lines if line)


def _rich_line(part: Any) -> str:
    """One section, list, quote or code block of a rich-text block."""
    if not isinstance(part, dict):
        return ""
    if part.get("type") == "rich_text_list":  # its items are sections
        return "\n".join(_rich_line(item) for item in _list(part.get("elements")))
    return "".join(_rich_element(e) for e in _list(part.get("elements")))


def _rich_element(element: Any) -> str:
    e = _obj(element)
    kind, value = e.get("type"), e.get("text")
    if kind == "text" and isinstance(value, str):
        return _escape(value)
    if kind == "link" and isinstance(e.get("url"), str):
        return f"<{e['url']}|{_escape(value)}>" if isinstance(value, str) else f"<{e['url']}>"
    if kind in ("user", "channel", "usergroup"):
        ref = e.get("user_id") or e.get("channel_id") or e.get("usergroup_id")
        sigil = {"user": "@", "channel": "#", "usergroup": "!subteam^"}[str(kind)]
        return f"<{sigil}{ref}>" if isinstance(ref, str) else ""
    if kind == "emoji" and isinstance(e.get("name"), str):
        return f":{e['name']}:"
    if kind == "broadcast" and isinstance(e.get("range"), str):
        return f"<!{e['range']}>"
    return ""


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _attachments(event: dict[str, Any]) -> tuple[Attachment, ...]:
    """The message's files. One Slack sends as ``"file_access": "check_file_info"`` (Slack
    Connect, some DMs) has only its id: it is kept with no URL, and the surface asks
    files.info for the rest when the run downloads it (not here: the intake stays one
    store write before the ack)."""
    found = []
    files = event.get("files")  # a forwarded message's are not checked by the guard
    for f in files if isinstance(files, list) else []:
        if not isinstance(f, dict):
            continue
        url = f.get("url_private_download") or f.get("url_private")
        file_id = f.get("id") if isinstance(f.get("id"), str) else None
        if not url and f.get("file_access") == CHECK_FILE_INFO and file_id:
            found.append(Attachment(name=file_id, platform_id=file_id))
            continue
        if not isinstance(url, str) or not url:  # tombstoned, hidden, or still processing
            continue
        size, media_type = f.get("size"), f.get("mimetype")
        found.append(
            Attachment(
                name=str(f.get("name") or f.get("title") or file_id or "file"),
                url=url,
                size=int(size) if isinstance(size, int) else None,
                media_type=media_type if isinstance(media_type, str) and media_type else None,
                platform_id=file_id,
            )
        )
    return tuple(found)


def _unavailable(event: dict[str, Any]) -> list[str]:
    """The names of the message's files Slack gave no way to fetch: deleted (a tombstone),
    hidden by the workspace's storage limit, still processing."""
    names = []
    files = event.get("files")
    for f in files if isinstance(files, list) else []:
        if not isinstance(f, dict) or f.get("url_private_download") or f.get("url_private"):
            continue
        if f.get("file_access") == CHECK_FILE_INFO and isinstance(f.get("id"), str):
            continue  # fetched through files.info at the run
        name = f.get("name") or f.get("title")
        names.append(str(name) if isinstance(name, str) and name else "a file")
    return names


def _unavailable_note(names: list[str]) -> str:
    """Told to the agent, so that it can say so instead of answering as if there were none."""
    listed = ", ".join(f"`{n}`" if n != "a file" else n for n in names[:MAX_FORWARDS])
    return (
        f"(The person also shared {listed}, which Slack did not make available to the "
        "gateway: deleted, hidden by the workspace's storage limit, or still processing.)"
    )


def _shared(event: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages forwarded (or shared) in ``event``: Slack carries each as an attachment
    marked ``is_share`` (or ``is_msg_unfurl``, a pasted message link), not in ``text``."""
    found = []
    for item in event.get("attachments") or []:
        if isinstance(item, dict) and (item.get("is_share") or item.get("is_msg_unfurl")):
            found.append(item)
    return found[:MAX_FORWARDS]


def _forwarded(shared: list[dict[str, Any]]) -> str:
    """The forwarded messages as quotes for the prompt, each under who wrote it and where."""
    parts = []
    for item in shared:
        body = _unescape(str(item.get("text") or item.get("fallback") or "")).strip()
        author = item.get("author_name") or item.get("author_subname")
        if not author and isinstance(item.get("author_id"), str):
            author = f"<@{item['author_id']}>"
        link = item.get("from_url") or item.get("original_url")
        head = "Forwarded message" + (f" from {author}" if author else "")
        head += f" ({link}):" if isinstance(link, str) and link else ":"
        quoted = "\n".join(f"> {line}" for line in body.splitlines()) or "> (no text)"
        parts.append(f"{head}\n{quoted}")
    return "\n\n".join(parts)


def _with_forwarded(text: str, shared: list[dict[str, Any]]) -> str:
    """The person's own words, then what they forwarded (the request when they wrote none)."""
    quoted = _forwarded(shared)
    if not quoted:
        return text
    return f"{text}\n\n{quoted}" if text else quoted


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
        self._operators = set(s.operators)
        self._teams = set(s.allowed_teams)
        self._channels = set(s.allowed_channels)
        self._users = set(s.allowed_users)
        self._app: AsyncApp | None = None
        self._socket: Any = None  # AsyncSocketModeHandler, imported only in socket mode
        self._bot_user_id: str | None = None
        self._down: str | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # answers to button presses
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
            # events() checks the signature first (guard.signature_failure: the raw bytes,
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
        app.action(re.compile(r".*"))(self._on_action)  # old buttons too: "expired"
        app.command(SLASH_COMMAND)(self._on_command)
        self._app = app
        # here, before the gateway's recovery requeues anything: a start refused later would
        # stop the runs it had just begun
        try:
            auth = await self.client.auth_test()
            self._bot_user_id = auth.get("user_id")
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
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=1)  # the core allows adapters 2 s to stop
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

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
            app.router.add_post(EVENTS_PATH, self.events)
            gate_bodies(app, EVENTS_PATH, self._refusal)  # unsigned bodies are never read

    def _refusal(self, request: web.Request) -> web.Response | None:
        """Why the request cannot be Slack's from its headers alone (no signature, or a
        stale timestamp), or None: its signature is checked once its body is read."""
        failure = guard.header_failure(
            request.headers.get("X-Slack-Request-Timestamp"),
            request.headers.get("X-Slack-Signature"),
        )
        if failure is None:
            return None
        self.ctx.metrics.auth_failures.labels(PLATFORM, failure).inc()
        return web.Response(status=401, text="invalid request signature")

    async def events(self, request: web.Request) -> web.Response:
        if self._app is None:
            return web.Response(status=503, text="not started")
        raw = await request.read()  # over server.max_body_bytes: 413 (the server counts it)
        secret = self.settings.signing_secret
        failure = guard.signature_failure(
            raw,
            request.headers.get("X-Slack-Request-Timestamp"),
            request.headers.get("X-Slack-Signature"),
            secret.get_secret_value() if secret else "",
        )
        if failure is not None:
            self.ctx.metrics.auth_failures.labels(PLATFORM, failure).inc()
            return web.Response(status=401, text="invalid request signature")
        body, problem = guard.parse(raw, request.content_type)
        if body is None:  # signed, but Slack never sends this: not for bolt
            log.warning("slack: refused a signed request: %s", problem)
            self._count("malformed")
            return web.Response(status=400, text=f"not a Slack request: {problem}")
        if body.get("type") == "event_callback":
            # A message event needs no more of bolt than a converter: the bot's id is known
            # since start() (else in the payload's authorizations), self events are dropped
            # by _convert, and nothing answers in the ack. Routing it through bolt's dispatch
            # (a Web API client built per request, middleware, matchers, kwargs) was most of
            # the CPU an event cost. Everything else (url_verification, buttons, /jazz) and
            # socket mode go through bolt.
            return _event_response(await self._on_event(body, None))
        # bolt re-parses the text it is given: a form body goes to it as the JSON of what
        # guard.parse read (bolt's own form parsing misreads any form holding "payload")
        bolt_request = AsyncBoltRequest(
            body=guard.bolt_text(raw, request.content_type, body),
            query=request.query_string,
            headers=dict(request.headers),
        )
        bolt_response = await self._app.async_dispatch(bolt_request)
        return await to_aiohttp_response(bolt_response)

    # -- intake -------------------------------------------------------------------------------

    def _allowed(self, team: str, channel: str, user: str) -> bool:
        if self.settings.allow_everyone:
            return True
        return (
            (not self._teams or team in self._teams)
            and (not self._channels or channel in self._channels)
            and (not self._users or user in self._users)
        )

    def _count(self, outcome: str) -> None:
        self.ctx.metrics.messages.labels(PLATFORM, outcome).inc()

    def _bot_id(self, body: dict[str, Any], context: Any) -> str | None:
        found = getattr(context, "bot_user_id", None) or self._bot_user_id
        if found:
            return str(found)
        for auth in body.get("authorizations") or []:
            if isinstance(auth, dict) and auth.get("is_bot") and auth.get("user_id"):
                return str(auth["user_id"])
        return None

    async def _on_event(self, body: dict[str, Any], context: Any) -> BoltResponse | None:
        inbound = await self._convert(body, self._bot_id(body, context))
        if inbound is None:
            return None
        result = await self.ctx.gateway.submit(inbound)
        if result.status is SubmitStatus.REFUSED:
            return BoltResponse(status=503, body="the gateway is shutting down; retry")
        return None

    async def _convert(self, body: dict[str, Any], bot: str | None) -> Inbound | None:
        event = body.get("event") or {}
        kind, subtype = event.get("type"), event.get("subtype")
        user, channel = event.get("user"), event.get("channel")
        if kind not in ("app_mention", "message"):
            return self._ignore(f"event {kind}")
        if event.get("bot_id") or subtype == "bot_message" or (bot and user == bot):
            return self._ignore("a bot's message")
        if subtype is not None and subtype not in PERSON_SUBTYPES:
            return self._ignore(f"message subtype {subtype}")
        if not isinstance(user, str) or not isinstance(channel, str) or not event.get("ts"):
            return self._ignore("no user, channel or ts")
        team = str(body.get("team_id") or event.get("team") or "")
        user_team = _sender_team(event, team)
        ts, thread_ts = str(event["ts"]), event.get("thread_ts")
        ids = [user, channel, ts] + [v for v in (team, user_team, thread_ts) if v]
        if not all(isinstance(v, str) and SLACK_ID.match(v) for v in ids):
            return self._ignore("a user, channel, team or ts that is not a Slack id")
        # a message's text is its blocks' when Slack sent only those (text empty)
        raw_text = str(event.get("text") or "") or _blocks_text(event.get("blocks"))
        # an app_mention carries no channel_type: a DM is also told by its channel id, or a
        # mention in a DM, taken before its message.im twin, was keyed as a thread of its own
        is_dm = event.get("channel_type") == "im" or channel.startswith("D")
        if is_dm and (not thread_ts or self._bot_wrote_root(event, bot)):
            # one conversation per DM: a reply in a thread under one of the bot's own posts
            # there (Slack offers "Reply in thread" on its prompts) answers it, as any message
            key, reply_ts = f"slack:{team}:{channel}", None
        elif is_dm:  # a thread the person started on their own message is its own
            key = f"slack:{team}:{channel}:{thread_ts}"
            reply_ts = thread_ts
        elif kind == "app_mention":
            reply_ts = thread_ts or ts
            key = f"slack:{team}:{channel}:{reply_ts}"
        else:  # a plain channel message: only in a thread the bot is part of
            if bot and f"<@{bot}" in raw_text:
                return self._ignore("mentions the bot (its app_mention event carries it)")
            if not thread_ts:
                return self._ignore("top-level channel message without a mention")
            key = f"slack:{team}:{channel}:{thread_ts}"
            reply_ts = thread_ts
            if await self.ctx.store.conversation_by_key(key) is None:
                return self._ignore("a thread the bot is not part of")
        if not self._allowed(user_team, channel, user):
            log.info(
                "slack: ignored %s from %s of %s in %s/%s (not allowed)",
                kind,
                user,
                user_team,
                team,
                channel,
            )
            self._count("denied")
            return None
        shared = _shared(event)
        attachments = _attachments(event) + tuple(a for item in shared for a in _attachments(item))
        text = _with_forwarded(_text(raw_text, bot), shared)
        missing = _unavailable(event) + [n for item in shared for n in _unavailable(item)]
        if missing:
            note = _unavailable_note(missing)
            text = f"{text}\n\n{note}" if text else note
        if not text and not attachments:
            text = "/help"
        # the message, not the event: one message can come as two events with ids of their
        # own (message.im and app_mention for a DM that mentions the bot; a mention in a
        # thread when the bot's id is unknown), and a retry of either has the same channel/ts
        event_id = f"{channel}:{ts}"
        return Inbound(
            platform=PLATFORM,
            event_id=event_id,
            thread_key=key,
            sender_id=user,
            sender_name=f"<@{user}>",
            text=text,
            attachments=attachments,
            shared_chat=not is_dm,
            is_operator=user in self._operators,
            target={"team": team, "channel": channel, "thread_ts": reply_ts},
        )

    def _bot_wrote_root(self, event: dict[str, Any], bot: str | None) -> bool:
        """Is the thread ``event`` replies in under one of the bot's own posts? Slack says
        who wrote a thread's root (``parent_user_id``); an event without it is asked of the
        surface, which remembers its recent posts outside threads."""
        parent = event.get("parent_user_id")
        if isinstance(parent, str) and parent and bot:
            return parent == bot
        return self.surface.posted_top_level(str(event["channel"]), str(event["thread_ts"]))

    def _ignore(self, why: str) -> Inbound | None:
        log.debug("slack: ignored event (%s)", why)
        self._count("ignored")
        return None

    # -- interactivity ------------------------------------------------------------------------

    async def _on_action(self, ack: Any, body: dict[str, Any]) -> None:
        """Resolve the press in the core (local and quick), ack, then answer on Slack."""
        try:
            answer = await self._press(body)
        finally:
            await ack()
        if answer is not None:
            task = asyncio.create_task(self._answer_press(answer), name="slack-press")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _press(self, body: dict[str, Any]) -> PressAnswer | None:
        """The press in the core; returns how to answer it on Slack. The pressed message is
        edited to the core's ``resolved`` (no buttons in it) when the press answered it, and
        also when the press found it expired (the Stop of a run that is over, a prompt
        nobody can answer now): else it keeps its buttons, and "working", forever. As on
        Telegram, an expired one is touched only if the button is of the gateway's own."""
        user_info = _obj(body.get("user"))
        user = str(user_info.get("id") or "")
        actions = body.get("actions") or []
        value = actions[0].get("value") if actions and isinstance(actions[0], dict) else None
        container, message = _obj(body.get("container")), _obj(body.get("message"))
        channel = str(container.get("channel_id") or _obj(body.get("channel")).get("id") or "")
        message_ts = container.get("message_ts") or message.get("ts")
        thread_ts = container.get("thread_ts") or message.get("thread_ts")
        team = str(_obj(body.get("team")).get("id") or user_info.get("team_id") or "")
        # the presser's own workspace for the allowlist (Slack Connect: not the app's)
        user_team = str(user_info.get("team_id") or team)
        if not user or not channel or not isinstance(value, str) or not value:
            log.info("slack: ignored a block action without user, channel or value")
            return None
        target = ReplyTarget(surface=PLATFORM, thread_key=f"slack:{team}:{channel}", context={})
        if not self._allowed(user_team, channel, user):
            # told, as on Telegram: a button that silently does nothing reads as broken
            log.info("slack: refused a press by %s in %s (not allowed)", user, channel)
            self._count("denied")
            return PressAnswer(
                target, ephemeral=_ephemeral(channel, user, NOT_ALLOWED_TEXT, thread_ts)
            )
        try:
            result = await self.ctx.gateway.press(
                value, user, is_operator=user in self._operators, actor_name=f"<@{user}>"
            )
        except Exception:  # a store that cannot write (a full disk), a bug: said, as on Telegram
            log.exception("slack: a press by %s in %s failed", user, channel)
            failed = _ephemeral(channel, user, PRESS_FAILED_TEXT, thread_ts)
            return PressAnswer(target, ephemeral=failed)
        plan = press_plan(value, result)
        stale = plan.change is MessageChange.SETTLE
        ref = resolved = None
        # a message is edited with its new text or not at all (chat.update wants one), so a
        # plan to drop its buttons only leaves it be
        if plan.change in (MessageChange.EDIT, MessageChange.SETTLE) and message_ts:
            ref, resolved = f"{channel}:{message_ts}", plan.resolved
        ephemeral: dict[str, Any] | None = None
        if plan.text and not (plan.edited and ref is not None):  # an edit says it all
            ephemeral = _ephemeral(channel, user, plan.text, thread_ts)
        if ref is None and ephemeral is None:
            return None
        return PressAnswer(target, ref, resolved, stale, ephemeral)

    async def _answer_press(self, answer: PressAnswer) -> None:
        """Edit the pressed message, then tell the presser; neither failing stops the other."""
        if answer.ref is not None and answer.resolved is not None:
            # through the surface: a 429 holds the edit and sends it when Slack reopens,
            # so the pressed message does not keep its buttons
            settle = self.surface.settle if answer.stale else self.surface.edit
            await self._answer_call(
                "chat.update", settle(answer.target, answer.ref, answer.resolved)
            )
        if answer.ephemeral is not None:
            await self._answer_call(
                "chat.postEphemeral", self.client.chat_postEphemeral(**answer.ephemeral)
            )

    async def _answer_call(self, method: str, call: Awaitable[Any]) -> None:
        """One Slack call of a press's answer: a failure is logged, never raised (nothing
        waits for this task but shutdown); a held edit goes out once Slack allows."""
        try:
            await call
        except DeliveryError as exc:
            if exc.retry_after:
                log.info("slack: the answer to a button press waits for Slack: %s", exc)
            else:
                log.warning("slack: could not answer a button press (%s): %s", method, exc)
        except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("slack: could not answer a button press (%s): %s", method, exc)

    # -- the /jazz slash command --------------------------------------------------------------

    async def _on_command(self, ack: Any, body: dict[str, Any]) -> BoltResponse | None:
        # Slack escapes &, < and > in a command's text as in a message's
        words = _unescape(str(body.get("text") or "")).split(maxsplit=1)
        word = words[0].lower().lstrip("!/") if words else "help"
        # "/jazz new <question>": the fresh conversation starts with it, as "!new <question>"
        rest = words[1].strip() if len(words) > 1 and word == "new" else ""
        if word not in SLASH_COMMANDS:
            unknown = f"Unknown command `{_escape(word)}`. {SLASH_HELP}"
            await ack(SLASH_HELP if word == "help" else unknown)
            return None
        team, channel = str(body.get("team_id") or ""), str(body.get("channel_id") or "")
        user = str(body.get("user_id") or "")
        if not all(SLACK_ID.match(v) for v in (team, channel, user)):
            await ack("That command came without a team, channel or user.")
            return None
        if not self._allowed(team, channel, user):
            log.info(
                "slack: ignored /jazz %s from %s in %s/%s (not allowed)", word, user, team, channel
            )
            self._count("denied")
            await ack(NOT_ALLOWED_TEXT)  # only they see a command's ack
            return None
        found = await self._command_conversation(team, channel, body)
        if found is None:
            await ack(
                "No conversation here yet: mention me in a channel, or message me directly, "
                "to start one."
            )
            return None
        key, target = found
        inbound = Inbound(
            platform=PLATFORM,
            event_id=f"command:{body.get('trigger_id') or time.time_ns()}",
            thread_key=key,
            sender_id=user,
            sender_name=f"<@{user}>",
            text=f"/{word} {rest}" if rest else f"/{word}",
            shared_chat=not _is_dm(channel, body.get("channel_name")),
            is_operator=user in self._operators,
            target=target,
        )
        try:
            result = await self.ctx.gateway.submit(inbound)
        except StoreError as exc:  # Slack never sends a command again: said, as the web chat's
            log.error("slack: /jazz %s not stored: %s", word, exc)
            await ack(NOT_STORED_FULL if isinstance(exc, StoreFull) else NOT_STORED)
            return None
        if result.status is SubmitStatus.REFUSED:
            await ack("The gateway is restarting; try again in a minute.")
            return None
        where = "here" if target.get("thread_ts") is None else "in the conversation's thread"
        await ack(f"`/jazz {word}`: the answer is {where}.")
        return None

    async def _command_conversation(
        self, team: str, channel: str, body: dict[str, Any]
    ) -> tuple[str, dict[str, Any]] | None:
        """A DM's own conversation, or the channel's most recently active thread; None when
        there is none yet. Only a DM with the bot has one (the bot hears only its own DMs):
        in a DM between two people ``/jazz`` still reaches the app, but a reply posted
        there would be refused (the bot is not in it) and the answer lost."""
        if _is_dm(channel, body.get("channel_name")):
            key = f"slack:{team}:{channel}"
            if await self.ctx.store.conversation_by_key(key) is None:
                return None
            return key, {"team": team, "channel": channel, "thread_ts": None}
        prefix = f"slack:{team}:{channel}:"
        latest = await self.ctx.store.latest_conversation(prefix)
        if latest is None:
            return None
        thread_ts = latest.thread_key[len(prefix) :]
        return latest.thread_key, {"team": team, "channel": channel, "thread_ts": thread_ts}


def _event_response(refusal: BoltResponse | None) -> web.Response:
    if refusal is None:
        return web.Response(status=200)
    return web.Response(status=refusal.status, text=refusal.body)


def _sender_team(event: dict[str, Any], team: str) -> str:
    """The workspace of the person who wrote ``event``, which ``allowed_teams`` is about. In
    a Slack Connect channel (shared with another organisation) the envelope's ``team_id`` is
    the workspace the app is installed in, whoever wrote: an external member's own is the
    event's ``user_team`` (or its ``team``). ``team`` (the envelope's) when neither is set."""
    for field in ("user_team", "team"):
        value = event.get(field)
        if isinstance(value, str) and value:
            return value
    return team


def _ephemeral(channel: str, user: str, text: str, thread_ts: Any) -> dict[str, Any]:
    """chat.postEphemeral's arguments: ``text`` to ``user`` only, in the pressed thread."""
    args: dict[str, Any] = {"channel": channel, "user": user, "text": text}
    if thread_ts:
        args["thread_ts"] = str(thread_ts)
    return args


def _obj(value: Any) -> dict[str, Any]:
    """``value`` when it is an object, else an empty one (ids may come as bare strings)."""
    return value if isinstance(value, dict) else {}


def _is_dm(channel: str, channel_name: Any) -> bool:
    return channel_name == "directmessage" or channel.startswith("D")
