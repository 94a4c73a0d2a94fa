"""Who may use the web chat, checked on every one of its routes.

With ``web.token`` set, whoever has the token (``Authorization: Bearer``, ``?token=`` for
an API client's EventSource, which cannot send headers, or the page's login cookie, see
:mod:`.login`); no body is read without it. Without one,
the chat trusts whoever reaches it on loopback, which is the person at the keyboard only
if what a web page in their browser could make of it is refused (DNS rebinding, a
cross-site form) and so is a conversation's own account: an agent run on this host
reaching for another conversation's thread (:mod:`bridge.http.peers`).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable

from aiohttp import web

from bridge.http.login import (
    LIMITED,
    CookieLogin,
    FailedLogins,
    client_address,
    limited_text,
    token_matches,
)
from bridge.http.peers import can_tell, peer_uid
from bridge.ports import AdapterContext

from .answers import BAD_THREAD, bad, thread_of
from .spec import is_loopback

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

BEARER = "bearer "  # an Authorization scheme, compared in lower case
FORM_TYPE = "multipart/form-data"  # a message with files (:mod:`.form`)
FORM_HEADER = "X-Requested-With"  # what a form must carry: no cross-site page can add it
# the page's login (:mod:`.login`): sent with every request of the page, its event stream
# and its file links; its own label, so an /ops cookie with the same token is not one
LOGIN = CookieLogin(cookie="jazz_bridge_web", path="/", label=b"jazz-bridge web chat cookie ")


class WebAuth:
    """The token, the browser guard and the peer check of the web chat's routes."""

    def __init__(self, ctx: AdapterContext) -> None:
        self.ctx = ctx
        token = ctx.settings.token
        self._token: bytes | None = token.get_secret_value().encode() if token else None
        # wrong tokens per address, whichever way given (a bearer, ?token=, the login form)
        self.failures = FailedLogins()
        # connection -> whether its client is a conversation's account (see _from_a_run);
        # forgotten with the connection
        self._peers: weakref.WeakKeyDictionary[asyncio.BaseTransport, str] = (
            weakref.WeakKeyDictionary()
        )

    def admitted(self, request: web.Request) -> str | web.Response:
        """The route's thread, when it names one and the request may go on (:meth:`refusal`);
        else the answer that refuses it."""
        thread = thread_of(request)
        if thread is None:
            return bad(BAD_THREAD)
        refused = self.refusal(request)
        return thread if refused is None else refused

    def refusal(self, request: web.Request) -> web.Response | None:
        """None when the request may go on (a body is read only then): no token is set, or
        it carries the token or a valid login cookie. Else 401, or 429 while its address has
        given too many wrong tokens (:class:`~bridge.http.login.FailedLogins`); each counted
        as an auth failure (reason ``token``)."""
        if self._token is None:
            return None
        given = self._given(request)
        if given:
            wait = self.failures.retry_after(client_address(request))
            if wait is not None:
                return self.limited(wait)
            if token_matches(self._token, given):
                return None
            self.failures.failed(client_address(request))
        elif LOGIN.carried(request, self._token):
            return None
        self.ctx.metrics.auth_failures.labels("web", "token").inc()
        return bad("missing or wrong token (log in on the page, or Authorization: Bearer ...)", 401)

    def limited(self, retry_after: int) -> web.Response:
        """The answer to a token given from an address that gave too many wrong ones."""
        self.ctx.metrics.auth_failures.labels("web", "token").inc()
        refused = bad(limited_text(retry_after), LIMITED)
        refused.headers["Retry-After"] = str(retry_after)
        return refused

    def guard(self, handler: Handler, *, forms: bool = False) -> Handler:
        """What a browser cannot be made to do from another site, on every web route.

        Without a token the chat trusts whoever reaches loopback, so two things a web page
        the user visits could otherwise do are refused: reach the API under its own name
        (DNS rebinding: the Host must be a loopback name) and post to it (a cross-site
        form or ``no-cors`` fetch: a POST must be JSON, which a browser sends cross-site
        only after a preflight this server never grants, and its Origin, when sent, must
        be this server). ``forms``: the route also takes ``multipart/form-data`` (a
        message with files), which any page can make a browser send, so only with the
        header :data:`FORM_HEADER`, which no page of another site can add without that
        preflight.
        """

        async def guarded(request: web.Request) -> web.StreamResponse:
            if self._token is None and not is_loopback(_hostname(request.host)):
                return bad(f"this web chat answers on loopback only, not as {request.host!r}", 421)
            refusal = await self._from_a_run(request) if self._token is None else None
            if refusal:
                self.ctx.metrics.auth_failures.labels("web", "account").inc()
                return bad(refusal, 403)
            if request.method == "POST":
                kind = request.content_type
                if forms and kind == FORM_TYPE:
                    if FORM_HEADER not in request.headers:
                        self.ctx.metrics.auth_failures.labels("web", "origin").inc()
                        return bad(
                            f"a form is taken only with the header {FORM_HEADER} (any value), "
                            "which another site's page cannot send",
                            403,
                        )
                elif kind != "application/json":
                    also = f", or {FORM_TYPE} with files" if forms else ""
                    return bad(f"the body must be JSON (Content-Type: application/json){also}", 415)
                origin = request.headers.get("Origin")
                if origin is not None and _hostport(origin) != request.host.lower():
                    self.ctx.metrics.auth_failures.labels("web", "origin").inc()
                    return bad("a request from another site is not accepted", 403)
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

    @staticmethod
    def _given(request: web.Request) -> str:
        """The token a request gives itself ("" for none): its bearer, or ``?token=``."""
        header = request.headers.get("Authorization", "")
        # the scheme in any case (RFC 7235); another scheme (a proxy's Basic) is not ours
        bearer = header[len(BEARER) :] if header[: len(BEARER)].lower() == BEARER else ""
        return bearer.strip() or request.query.get("token", "")

    @property
    def token(self) -> bytes | None:
        """The configured token (None: the chat trusts loopback), for :mod:`.login`."""
        return self._token


def _hostname(host: str) -> str:
    """The name in a Host header, without its port (``[::1]:8787`` -> ``::1``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _hostport(origin: str) -> str:
    """``host:port`` of an Origin (``http://127.0.0.1:8787`` -> ``127.0.0.1:8787``)."""
    return origin.strip().lower().split("://", 1)[-1].rstrip("/")
