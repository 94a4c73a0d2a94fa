"""The web chat's login with ``web.token``: the token given once, then a cookie.

Without it the page used to load and say "error 401", with no way on but knowing to put
``?token=`` in the address (where it stayed, in the history too). Now the page asks for
it in a small form that sends it to ``POST /login`` (JSON, so in no address bar, history
or proxy log), and a link ``/?token=<token>`` is answered with a redirect to the same page
without it, as ``/ops`` does. Either way the browser gets the login cookie
(:data:`.auth.LOGIN`, :mod:`bridge.http.login`): HttpOnly, SameSite=Strict, an expiry
signed with the token; the page's requests, its event stream and its file links then
carry no token at all. A wrong token is said so: the form's answer, or ``?login=wrong``
on the page it redirects to. ``Authorization: Bearer`` keeps working for API clients.
Wrong tokens count against their address, whichever way they come (the form, the link, a
bearer): past :data:`~bridge.http.login.LOGIN_FAILURES_ALLOWED` in a minute, 429.
"""

from __future__ import annotations

from aiohttp import web

from bridge.http.login import client_address, token_matches, without_token

from .answers import bad
from .auth import LOGIN, WebAuth

WRONG = "wrong"  # ?login=wrong: the page says the token it was given is not the chat's
NO_STORE = {"Cache-Control": "no-store"}


class WebLogin:
    """``POST /login`` (the page's form) and ``/?token=`` (a link) to the login cookie."""

    def __init__(self, auth: WebAuth, *, secure_cookie: bool = False) -> None:
        self.auth = auth
        self.secure_cookie = secure_cookie  # web.secure_cookie: behind a TLS proxy

    def _secure(self, request: web.Request) -> bool:
        """Whether the login cookie is marked Secure: on https, or always with
        ``web.secure_cookie`` (the request came as plain http from a TLS-terminating proxy)."""
        return request.secure or self.secure_cookie

    def from_link(self, request: web.Request) -> web.Response | None:
        """``/?token=...``: a redirect to the page without it, the login set when the token is
        right (a wrong one: ``?login=wrong`` instead); None when there is nothing to do."""
        token = self.auth.token
        if token is None or "token" not in request.query:
            return None
        wait = self.auth.failures.retry_after(client_address(request))
        if wait is not None:
            return self.auth.limited(wait)
        if not token_matches(token, request.query["token"]):
            self.auth.failures.failed(client_address(request))
            self.auth.ctx.metrics.auth_failures.labels("web", "token").inc()
            return without_token(request, NO_STORE, login=WRONG)
        response = without_token(request, NO_STORE, drop=("login",))
        LOGIN.set_on(response, token, secure=self._secure(request))
        return response

    async def post(self, request: web.Request) -> web.Response:
        """``{"token": "..."}``: 204 with the login cookie, 403 for a wrong token."""
        token = self.auth.token
        if token is None:
            return bad("this web chat has no token: there is nothing to log in to", 404)
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError, LookupError, RecursionError):
            body = None
        given = body.get("token") if isinstance(body, dict) else None
        if not isinstance(given, str) or not given.strip():
            return bad('send the token as JSON: {"token": "..."}')
        wait = self.auth.failures.retry_after(client_address(request))
        if wait is not None:  # not compared: the answer tells a guesser nothing
            return self.auth.limited(wait)
        if not token_matches(token, given.strip()):
            self.auth.failures.failed(client_address(request))
            self.auth.ctx.metrics.auth_failures.labels("web", "token").inc()
            return bad("wrong token: this is not the web chat's token (web.token)", 403)
        response = web.Response(status=204, headers=NO_STORE)
        LOGIN.set_on(response, token, secure=self._secure(request))
        return response
