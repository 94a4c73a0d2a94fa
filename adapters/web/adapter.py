"""The web chat's HTTP routes and its surface (two converters around the core).

``POST /api/threads/{thread}/messages`` -> :class:`~bridge.model.Inbound` -> the core's
``submit`` (202 after the inbox write); ``GET .../messages`` reads the thread's transcript
from the store plus the live progress bubble; ``POST .../choices`` presses a choice;
``GET .../events`` streams the same as server-sent events.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage

from bridge import rules
from bridge.http.peers import can_tell, peer_uid
from bridge.http.server import gate_bodies
from bridge.model import Attachment, Inbound, Outgoing, ReplyKind, ReplyTarget
from bridge.ports import (
    AdapterContext,
    Capabilities,
    DeliveryError,
    PressStatus,
    SubmitStatus,
)
from bridge.store import StoreError, StoreFull

from .replay import EventLog
from .spec import check, is_loopback

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
log = logging.getLogger(__name__)

THREAD_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
MAX_TEXT = 100_000
MAX_USER = 200
ROLE_BY_KIND = {
    ReplyKind.ANSWER: "assistant",
    ReplyKind.ARTIFACT: "assistant",
    ReplyKind.NOTICE: "status",
    ReplyKind.ERROR: "error",
    ReplyKind.PROMPT: "prompt",
}
SSE_HEARTBEAT_S = 15.0
# events waiting for one stream to write them; a stream that falls this far behind (its
# client stopped reading) is ended after them, and its client resumes from the last it got
MAX_STREAM_BACKLOG = 1000
LAGGING = "lagging"  # the end of a stream's backlog (never sent): the stream closes there
BEARER = "bearer "  # an Authorization scheme, compared in lower case
MAX_LIVE_BUBBLES = 20  # progress bubbles (not in the store) kept per thread
# buttons shown (Stops included, which the store does not keep) remembered with their thread
MAX_KNOWN_CHOICES = 10_000
GAP_TEXT = "Some events were missed: read GET /api/threads/{}/messages again."
NOT_THIS_THREAD = "This button is not from this thread (or it has expired)."
# what a web page that is not this chat may do with it: nothing, not even frame it (a decoy
# over the frame would get the click that approves a tool)
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}


def _bad(message: str, status: int = 400) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _not_stored(exc: StoreError) -> web.Response:
    """A write the store refused: say so (nothing was acknowledged), 507 when the disk is full."""
    log.error("web: %s", exc)
    if isinstance(exc, StoreFull):
        return _bad("the gateway's disk is full: this was NOT stored; send it again later", 507)
    return _bad("the gateway cannot store this right now: it was NOT stored; try again", 503)


class WebSurface:
    name = "web"
    capabilities = Capabilities(
        edit=True, buttons=True, upload=True, typing=False, max_length=20_000, edit_interval_s=0.5
    )

    def __init__(self) -> None:
        # plain dicts, not defaultdicts: a thread name is free text a client chooses, so a
        # lookup must not leave an entry behind (an empty one per name, kept until restart)
        self.live: dict[str, dict[str, dict[str, Any]]] = {}  # thread -> ref -> bubble
        # thread -> the queues of its open event streams; a thread without one has no key
        self.listeners: dict[str, set[asyncio.Queue[dict[str, Any]]]] = {}
        self.recent = EventLog()  # what a reconnected event stream missed
        # a shown button's token (before its code) -> its thread, the newest kept
        self.choice_threads: OrderedDict[str, str] = OrderedDict()

    def _remember_choices(self, thread: str, message: Outgoing) -> None:
        """Note the thread of each button ``message`` shows: a press is taken there only."""
        for choice in message.choices:
            key = choice_key(choice.token)
            self.choice_threads[key] = thread
            self.choice_threads.move_to_end(key)
        while len(self.choice_threads) > MAX_KNOWN_CHOICES:
            self.choice_threads.popitem(last=False)

    def _publish(self, thread: str, event: dict[str, Any]) -> None:
        event = self.recent.add(thread, event)
        listeners = self.listeners.get(thread, set())
        for queue in list(listeners):
            if queue.qsize() < MAX_STREAM_BACKLOG:
                queue.put_nowait(event)
            else:  # dropping events here left the stream silently short: it ends instead
                listeners.discard(queue)
                queue.put_nowait({"type": LAGGING})

    @staticmethod
    def _thread(target: ReplyTarget) -> str:
        return str(target.context.get("thread") or target.thread_key.removeprefix("web:"))

    @staticmethod
    def _entry(out: Outgoing, ref: str) -> dict[str, Any]:
        return {
            "ref": ref,
            "role": ROLE_BY_KIND.get(out.kind, "status"),
            "text": out.text,
            "choices": [
                {"token": c.token, "label": c.label, "style": c.style} for c in out.choices
            ],
            "at": time.time(),
        }

    async def send(self, target: ReplyTarget, message: Outgoing, *, reply_key: str) -> str:
        thread = self._thread(target)
        entry = self._entry(message, reply_key)
        self._remember_choices(thread, message)
        if reply_key.startswith("progress:"):
            bubbles = self.live.setdefault(thread, {})
            bubbles[reply_key] = entry
            while len(bubbles) > MAX_LIVE_BUBBLES:  # keep the recent ones; memory stays bounded
                bubbles.pop(next(iter(bubbles)))
        self._publish(thread, {"type": "message", **entry})
        return reply_key

    async def edit(self, target: ReplyTarget, ref: str, message: Outgoing) -> None:
        thread = self._thread(target)
        entry = self._entry(message, ref)
        self._remember_choices(thread, message)
        bubbles = self.live.get(thread, {})
        if ref in bubbles:
            entry["at"] = bubbles[ref]["at"]
            bubbles[ref] = entry
        self._publish(thread, {"type": "edit", **entry})

    async def upload(
        self,
        target: ReplyTarget,
        name: str,
        data: bytes,
        media_type: str | None,
        *,
        reply_key: str,
    ) -> str:
        self._publish(
            self._thread(target),
            {
                "type": "file",
                "ref": reply_key,
                "name": name,
                "size": len(data),
                "mediaType": media_type,
            },
        )
        return reply_key

    async def typing(self, target: ReplyTarget) -> None:
        return None

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        raise DeliveryError("the web chat does not take attachments", permanent=True)


class WebAdapter:
    name = "web"

    def __init__(self, ctx: AdapterContext) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.surface = WebSurface()
        token = self.settings.token
        self._token: bytes | None = token.get_secret_value().encode() if token else None
        self._operators = set(self.settings.operators)
        self._closing = False
        # connection -> whether its client is a conversation's account (see _from_a_run);
        # forgotten with the connection
        self._peers: weakref.WeakKeyDictionary[asyncio.BaseTransport, str] = (
            weakref.WeakKeyDictionary()
        )

    # -- lifecycle ----------------------------------------------------------------------------

    async def initialize(self) -> None:
        # the spec's rules: serve applied them already, but no adapter opens without them
        rules.refuse(check(self.settings, self.ctx.core))

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self._closing = True  # event streams opened from now on are refused (503)
        for queues in self.surface.listeners.values():
            for queue in queues:
                queue.put_nowait({"type": "closing"})

    async def shutdown(self) -> None:
        return None

    def health(self) -> str | None:
        return None

    # -- routes -------------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/", self._guard(self.page))
        app.router.add_post("/api/threads/{thread}/messages", self._guard(self.post_message))
        app.router.add_get("/api/threads/{thread}/messages", self._guard(self.get_messages))
        app.router.add_post("/api/threads/{thread}/choices", self._guard(self.post_choice))
        app.router.add_get("/api/threads/{thread}/events", self._guard(self.events))
        gate_bodies(app, "/api/", self._refusal)  # with a token, no body read without it

    def _refusal(self, request: web.Request) -> web.Response | None:
        """A body is read only with the token (when one is set), or None."""
        if self._authorized(request):
            return None
        self.ctx.metrics.auth_failures.labels("web", "token").inc()
        return _bad("missing or wrong token (Authorization: Bearer ...)", 401)

    def _guard(self, handler: Handler) -> Handler:
        """What a browser cannot be made to do from another site, on every web route.

        Without a token the chat trusts whoever reaches loopback, so two things a web page
        the user visits could otherwise do are refused: reach the API under its own name
        (DNS rebinding: the Host must be a loopback name) and post to it (a cross-site
        form or ``no-cors`` fetch: a POST must be JSON, which a browser sends cross-site
        only after a preflight this server never grants, and its Origin, when sent, must
        be this server).
        """

        async def guarded(request: web.Request) -> web.StreamResponse:
            if self._token is None and not is_loopback(_hostname(request.host)):
                return _bad(f"this web chat answers on loopback only, not as {request.host!r}", 421)
            refusal = await self._from_a_run(request) if self._token is None else None
            if refusal:
                self.ctx.metrics.auth_failures.labels("web", "account").inc()
                return _bad(refusal, 403)
            if request.method == "POST":
                if request.content_type != "application/json":
                    return _bad("the body must be JSON (Content-Type: application/json)", 415)
                origin = request.headers.get("Origin")
                if origin is not None and _hostport(origin) != request.host.lower():
                    self.ctx.metrics.auth_failures.labels("web", "origin").inc()
                    return _bad("a request from another site is not accepted", 403)
            return await handler(request)

        return guarded

    async def _from_a_run(self, request: web.Request) -> str:
        """Why the client may not use the web chat ("" when it may): a conversation's
        account (a run on this host, see bridge/http/peers.py), or a client nobody can be told
        of (fail closed). Trusted loopback means the person at the keyboard, not an agent
        asking for another conversation's thread."""
        transport = request.transport
        if transport is None:
            return ""
        known = self._peers.get(transport)  # one look per connection: its peer stays
        if known is not None:
            return known
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        if not (isinstance(peer, tuple) and isinstance(local, tuple)):
            return ""  # not TCP (a Unix socket): no conversation reaches it
        uid = await asyncio.to_thread(peer_uid, peer[:2], local[:2])  # ~ms: /proc/net/tcp
        accounts = self.ctx.core.accounts
        refusal = ""
        if uid is None and can_tell():  # no process holds that socket, or it is not shown
            refusal = (
                "the web chat could not tell which account this connection is from (it was "
                "closed, or is not in the socket table), so it is refused; set web.token to "
                "use the chat by token"
            )
        elif uid is not None and accounts.uid_min <= uid <= accounts.uid_max:
            refusal = "a conversation's account may not use the web chat"
        self._peers[transport] = refusal
        return refusal

    def _authorized(self, request: web.Request) -> bool:
        if self._token is None:
            return True
        header = request.headers.get("Authorization", "")
        # the scheme in any case (RFC 7235); another scheme (a proxy's Basic) is not ours
        bearer = header[len(BEARER) :] if header[: len(BEARER)].lower() == BEARER else ""
        given = bearer.strip() or request.query.get("token", "")
        # surrogateescape: bytes that are not UTF-8 compare (and fail) as bytes, not a 500
        return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), self._token)

    def _thread(self, request: web.Request) -> str | None:
        thread = request.match_info["thread"]
        # fullmatch: "$" would also take a name ending in a newline (a 500 further on)
        return thread if THREAD_RE.fullmatch(thread) else None

    async def page(self, request: web.Request) -> web.Response:
        html = resources.files("adapters.web").joinpath("static/index.html").read_text("utf-8")
        return web.Response(text=html, content_type="text/html", headers=PAGE_HEADERS)

    async def _json(self, request: web.Request) -> dict[str, Any] | web.Response:
        if not self._authorized(request):
            self.ctx.metrics.auth_failures.labels("web", "token").inc()
            return _bad("missing or wrong token (Authorization: Bearer ...)", 401)
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError, RecursionError):  # nested past the stack too
            return _bad("body is not valid JSON")
        except LookupError:  # a charset Python does not know
            return _bad(f"unknown charset {request.charset!r}; send UTF-8")
        except (BadHttpMessage, web.RequestPayloadError) as exc:  # e.g. "gzip" that is not
            return _bad(f"the body could not be read (check its Content-Encoding): {exc}")
        if not isinstance(body, dict):
            return _bad("body must be a JSON object")
        for key, value in body.items():
            if isinstance(value, str) and not _utf8(value):
                return _bad(f"'{key}' is not valid text (a lone surrogate)")
        return body

    async def post_message(self, request: web.Request) -> web.Response:
        thread = self._thread(request)
        if thread is None:
            return _bad("thread must be 1-128 characters of A-Z a-z 0-9 . _ -")
        body = await self._json(request)
        if isinstance(body, web.Response):
            return body
        user, text = body.get("user"), body.get("text")
        if not isinstance(user, str) or not 0 < len(user) <= MAX_USER:
            return _bad(f"'user' must be a non-empty string of at most {MAX_USER} characters")
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT:
            return _bad(f"'text' must be a non-empty string of at most {MAX_TEXT} characters")
        key = request.headers.get("Idempotency-Key")
        if key is not None and not (0 < len(key) <= 200 and _utf8(key)):
            return _bad("Idempotency-Key must be 1-200 characters of UTF-8")
        inbound = Inbound(
            platform="web",
            event_id=f"idem:{thread}:{key}" if key else f"msg:{uuid.uuid4()}",
            thread_key=f"web:{thread}",
            sender_id=user,
            sender_name=user,
            text=text,
            shared_chat=False,
            is_operator=user in self._operators,
            target={"thread": thread},
        )
        try:
            result = await self.ctx.gateway.submit(inbound)
        except StoreError as exc:
            return _not_stored(exc)
        if result.status is SubmitStatus.REFUSED:
            return _bad("the gateway is shutting down; try again shortly", 503)
        return web.json_response(
            {"id": result.message_id, "duplicate": result.status is SubmitStatus.DUPLICATE},
            status=202,
        )

    async def get_messages(self, request: web.Request) -> web.Response:
        thread = self._thread(request)
        if thread is None:
            return _bad("thread must be 1-128 characters of A-Z a-z 0-9 . _ -")
        if not self._authorized(request):
            self.ctx.metrics.auth_failures.labels("web", "token").inc()
            return _bad("missing or wrong token (Authorization: Bearer ...)", 401)
        entries = await self.ctx.store.transcript(f"web:{thread}")
        settled: dict[int, str] = {}
        for e in entries:
            if e.role == "prompt" and e.choices and e.reply_id is not None:
                prompt = await self.ctx.store.get_prompt(choice_key(str(e.choices[0]["token"])))
                if prompt is None or prompt.state != "pending":
                    state = prompt.state if prompt else "expired"
                    settled[e.reply_id] = "✅ answered" if state == "answered" else "⌛ expired"
        messages: list[dict[str, Any]] = [
            {
                "role": e.role,
                "text": e.text + (f"\n\n_{settled[e.reply_id]}_" if e.reply_id in settled else ""),
                "at": e.at,
                "sender": e.sender,
                "messageId": e.message_id,
                "replyId": e.reply_id,
                "choices": [] if e.reply_id in settled else e.choices,
                "file": e.file_path,
            }
            for e in entries
        ]
        live = sorted(self.surface.live.get(thread, {}).values(), key=lambda e: e["at"])
        for entry in live:
            messages.append(
                {
                    "role": "status",
                    "text": entry["text"],
                    "at": entry["at"],
                    "choices": entry["choices"],
                    "live": True,
                }
            )
        messages.sort(key=lambda m: m["at"])
        return web.json_response({"thread": thread, "messages": messages})

    async def post_choice(self, request: web.Request) -> web.Response:
        thread = self._thread(request)
        if thread is None:
            return _bad("thread must be 1-128 characters of A-Z a-z 0-9 . _ -")
        body = await self._json(request)
        if isinstance(body, web.Response):
            return body
        user, token = body.get("user"), body.get("token")
        if not isinstance(user, str) or not user or not isinstance(token, str) or not token:
            return _bad("'user' and 'token' must be non-empty strings")
        try:
            if not await self._shown_in(thread, token):
                # another thread's button (or another platform's): its run is not this one's
                expired = PressStatus.EXPIRED.value
                return web.json_response({"status": expired, "text": NOT_THIS_THREAD}, status=410)
            result = await self.ctx.gateway.press(token, user, is_operator=user in self._operators)
        except StoreError as exc:
            return _not_stored(exc)
        status = {PressStatus.OK: 200, PressStatus.NOT_YOURS: 403, PressStatus.EXPIRED: 410}
        return web.json_response(
            {"status": result.status.value, "text": result.text}, status=status[result.status]
        )

    async def _shown_in(self, thread: str, token: str) -> bool:
        """Whether ``token`` is a button shown in ``thread``: remembered since it was shown,
        or (a prompt shown before a restart) its stored prompt is this thread's."""
        key = choice_key(token)
        shown = self.surface.choice_threads.get(key)
        if shown is not None:
            return shown == thread
        record = await self.ctx.store.get_prompt(key)
        conv = await self.ctx.store.conversation(record.conversation_id) if record else None
        return conv is not None and conv.thread_key == f"web:{thread}"

    def _missed(self, request: web.Request, thread: str) -> bytes:
        """What a stream starts with: for one that resumes (``Last-Event-ID``), the events it
        missed, or a ``gap`` event when they are no longer all kept; then the id to resume
        from (an id with no data: a stream that got no event yet resumes from here too)."""
        start = f"id: {self.surface.recent.current_id()}\n\n".encode()
        last = request.headers.get("Last-Event-ID")
        if last is None:
            return start
        events = self.surface.recent.since(thread, last)
        if events is None:
            return _sse({"type": "gap", "text": GAP_TEXT.format(thread)}) + start
        return b"".join(_sse(e) for e in events) + start

    async def events(self, request: web.Request) -> web.StreamResponse:
        thread = self._thread(request)
        if thread is None:
            return _bad("thread must be 1-128 characters of A-Z a-z 0-9 . _ -")
        if not self._authorized(request):
            self.ctx.metrics.auth_failures.labels("web", "token").inc()
            return _bad("missing or wrong token", 401)
        if self._closing:  # an EventSource does not reconnect after an answer that is not 200
            return _bad("the gateway is stopping", 503)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
        )
        await response.prepare(request)
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        # no await between the replay and listening: nothing is missed, nothing sent twice
        missed = self._missed(request, thread)
        self.surface.listeners.setdefault(thread, set()).add(queue)
        try:
            await response.write(b": connected\n\n")
            await response.write(missed)
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), timeout=SSE_HEARTBEAT_S)
                except TimeoutError:
                    await response.write(b": heartbeat\n\n")
                    continue
                if event.get("type") in ("closing", LAGGING):
                    break  # lagging: an EventSource reconnects with the last id it got
                await response.write(_sse(event))
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            queues = self.surface.listeners.get(thread, set())
            queues.discard(queue)
            if not queues:  # the thread's last stream: its name is forgotten with it
                self.surface.listeners.pop(thread, None)
        return response


def _sse(event: dict[str, Any]) -> bytes:
    """One server-sent event: its id (when it has one), type and JSON data."""
    head = f"id: {event['id']}\n" if "id" in event else ""
    return f"{head}event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def choice_key(token: str) -> str:
    """The part of a button's token that names its prompt or run (before ``.<code>``)."""
    return token.partition(".")[0]


def _hostname(host: str) -> str:
    """The name in a Host header, without its port (``[::1]:8787`` -> ``::1``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _hostport(origin: str) -> str:
    """``host:port`` of an Origin (``http://127.0.0.1:8787`` -> ``127.0.0.1:8787``)."""
    return origin.strip().lower().split("://", 1)[-1].rstrip("/")


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
