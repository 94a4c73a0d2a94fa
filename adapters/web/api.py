"""The web chat's JSON API over a thread, and the page at ``/`` that uses it.

``POST /api/threads/{thread}/messages`` -> :class:`~bridge.model.Inbound` -> the core's
``submit`` (202 after the inbox write), as JSON, or as a form with files (:mod:`.form`:
each staged until its turn, :mod:`.uploads`); ``GET .../messages`` reads the thread's transcript
from the store plus the live progress bubbles; ``POST .../choices`` presses a button shown
in the thread. A write the store refuses is said so (507 on a full disk, else 503):
nothing was acknowledged, so the client sends it again. The page is read once, served with
a Content-Security-Policy that allows its one script by its hash; opened as ``/?token=``
it logs in first (:mod:`.login`); the thread it reads is laid out by :mod:`.thread_view`.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import uuid
from importlib import resources
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage

from bridge.model import Attachment, Inbound
from bridge.ports import AdapterContext, PressStatus, SubmitStatus
from bridge.store import StoreError, StoreFull

from .answers import BAD_THREAD, bad, thread_of
from .auth import FORM_TYPE, WebAuth
from .form import FormReader, FormRefused, StagedFile
from .login import WebLogin
from .surface import WebSurface, choice_key
from .thread_view import ThreadView

log = logging.getLogger(__name__)

MAX_TEXT = 100_000
MAX_USER = 200
NOT_THIS_THREAD = "This button is not from this thread (or it has expired)."
# what a web page that is not this chat may do with it: nothing, not even frame it (a decoy
# over the frame would get the click that approves a tool)
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
# what the page itself may load: its own inline script (by its hash) and style, requests and
# images (a file's preview) from its own origin only; nothing else, no frame, no plugin
PAGE_CSP = (
    "default-src 'none'; script-src '{script}'; style-src 'unsafe-inline'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
PAGE = "static/index.html"
SCRIPT = re.compile(r"<script>(.*?)</script>", re.S)


class ThreadApi:
    """The API's handlers: a thread's messages posted and read, its buttons pressed."""

    def __init__(
        self, ctx: AdapterContext, auth: WebAuth, surface: WebSurface, forms: FormReader
    ) -> None:
        self.ctx = ctx
        self.forms = forms  # a message with files: its form read, its files staged
        self.auth = auth
        self.surface = surface
        self.operators = set(ctx.settings.operators)
        self.view = ThreadView(ctx, surface)
        self.login = WebLogin(auth, secure_cookie=ctx.settings.secure_cookie)
        # read once, at start (off the loop of every request); its script allowed by its hash
        self._html = resources.files("adapters.web").joinpath(PAGE).read_text("utf-8")
        self._headers = {**PAGE_HEADERS, "Content-Security-Policy": page_csp(self._html)}

    async def page(self, request: web.Request) -> web.Response:
        moved = self.login.from_link(request)  # /?token=...: the login, then a clean URL
        if moved is not None:
            return moved
        return web.Response(text=self._html, content_type="text/html", headers=self._headers)

    async def _json(self, request: web.Request) -> dict[str, Any] | web.Response:
        refused = self.auth.refusal(request)
        if refused is not None:
            return refused
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError, RecursionError):  # nested past the stack too
            return bad("body is not valid JSON")
        except LookupError:  # a charset Python does not know
            return bad(f"unknown charset {request.charset!r}; send UTF-8")
        except (BadHttpMessage, web.RequestPayloadError) as exc:  # e.g. "gzip" that is not
            return bad(f"the body could not be read (check its Content-Encoding): {exc}")
        if not isinstance(body, dict):
            return bad("body must be a JSON object")
        for key, value in body.items():
            if isinstance(value, str) and not _utf8(value):
                return bad(f"'{key}' is not valid text (a lone surrogate)")
        return body

    async def post_message(self, request: web.Request) -> web.Response:
        thread = thread_of(request)
        if thread is None:
            return bad(BAD_THREAD)
        files: list[StagedFile] = []
        if request.content_type == FORM_TYPE:  # a message with files
            refused = self.auth.refusal(request)
            if refused is not None:
                return refused
            try:
                form = await self.forms.read(request)
            except FormRefused as exc:
                if exc.status == 413:
                    self.ctx.metrics.auth_failures.labels("web", "too_big").inc()
                return bad(str(exc), exc.status)
            body: dict[str, Any] | web.Response = dict(form.fields)
            files = form.files
        else:
            body = await self._json(request)
        if isinstance(body, web.Response):
            return body
        answer, taken = await self._submit(request, thread, body, files)
        if not taken:  # refused, or a duplicate: no message will take its files
            await self.forms.discard(files)
        return answer

    async def _submit(
        self, request: web.Request, thread: str, body: dict[str, Any], files: list[StagedFile]
    ) -> tuple[web.Response, bool]:
        """The answer to a message, and whether it was stored as a new one (its files are
        its own then)."""
        user, text = body.get("user"), body.get("text", "" if files else None)
        if not isinstance(user, str) or not 0 < len(user) <= MAX_USER:
            return _no(f"'user' must be a non-empty string of at most {MAX_USER} characters")
        if not isinstance(text, str) or len(text) > MAX_TEXT or not (text.strip() or files):
            return _no(
                f"'text' must be a non-empty string of at most {MAX_TEXT} characters "
                "(it may be empty when files come with it)"
            )
        key = request.headers.get("Idempotency-Key")
        if key is not None and not (0 < len(key) <= 200 and _utf8(key)):
            return _no("Idempotency-Key must be 1-200 characters of UTF-8")
        attachments = tuple(
            Attachment(name=f.name, size=f.size, media_type=f.media_type, platform_id=f.upload_id)
            for f in files
        )
        inbound = Inbound(
            platform="web",
            event_id=f"idem:{thread}:{key}" if key else f"msg:{uuid.uuid4()}",
            thread_key=f"web:{thread}",
            sender_id=user,
            sender_name=user,
            text=text,
            attachments=attachments,
            shared_chat=False,
            is_operator=user in self.operators,
            target={"thread": thread},
        )
        try:
            result = await self.ctx.gateway.submit(inbound)
        except StoreError as exc:
            return _not_stored(exc), False
        if result.status is SubmitStatus.REFUSED:
            return _no("the gateway is shutting down; try again shortly", 503)
        answer: dict[str, Any] = {
            "id": result.message_id,
            "duplicate": result.status is SubmitStatus.DUPLICATE,
        }
        if files:  # the names they are kept under (cleaned), for the client to show
            answer["files"] = [{"name": f.name, "size": f.size} for f in files]
        return web.json_response(answer, status=202), result.status is SubmitStatus.ACCEPTED

    async def get_messages(self, request: web.Request) -> web.Response:
        thread = self.auth.admitted(request)
        if isinstance(thread, web.Response):
            return thread
        messages = await self.view.messages(thread)
        return web.json_response({"thread": thread, "messages": messages})

    async def post_choice(self, request: web.Request) -> web.Response:
        thread = thread_of(request)
        if thread is None:
            return bad(BAD_THREAD)
        body = await self._json(request)
        if isinstance(body, web.Response):
            return body
        user, token = body.get("user"), body.get("token")
        if not isinstance(user, str) or not user or not isinstance(token, str) or not token:
            return bad("'user' and 'token' must be non-empty strings")
        try:
            if not await self._shown_in(thread, token):
                # another thread's button (or another platform's): its run is not this one's
                expired = PressStatus.EXPIRED.value
                return web.json_response({"status": expired, "text": NOT_THIS_THREAD}, status=410)
            result = await self.ctx.gateway.press(token, user, is_operator=user in self.operators)
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


def page_csp(html: str) -> str:
    """The page's Content-Security-Policy, its one inline script allowed by its SHA-256."""
    scripts = SCRIPT.findall(html)
    if len(scripts) != 1:
        raise ValueError(f"the web chat's page must have one inline script, not {len(scripts)}")
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    return PAGE_CSP.format(script=f"sha256-{digest}")


def _not_stored(exc: StoreError) -> web.Response:
    """A write the store refused: say so (nothing was acknowledged), 507 when the disk is full."""
    log.error("web: %s", exc)
    if isinstance(exc, StoreFull):
        return bad("the gateway's disk is full: this was NOT stored; send it again later", 507)
    return bad("the gateway cannot store this right now: it was NOT stored; try again", 503)


def _no(message: str, status: int = 400) -> tuple[web.Response, bool]:
    """A message refused before the store: its answer, and not stored."""
    return bad(message, status), False


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
