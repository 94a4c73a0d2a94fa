"""A login kept in a cookie: the token given once, then an expiry signed with it.

The operator view (:mod:`bridge.http.ops`) and the web chat's page (``adapters/web``) both
take their token once (``?token=`` or a form) and keep the login in an HttpOnly,
SameSite=Strict cookie, so the token stays out of the address bar, the history and every
later request. The cookie holds its expiry and a MAC of it keyed by the token (never the
token itself): a copied cookie stops working when it expires and its holder cannot make it
last longer; changing the token ends every login. Each login's MAC has a label of its own,
so one surface's cookie is never another's even when both have the same token. Every
comparison is constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass

from aiohttp import web

LOGIN_TTL_S = 12 * 3600  # a login lasts a working day; then the token again
EXPIRED = 401  # a cookie this login issued, past its expiry: log in again
FORGED = 403  # a cookie this login did not issue (or for another token)


def token_matches(token: bytes, given: str) -> bool:
    """Whether ``given`` is ``token``, in constant time."""
    # surrogateescape: bytes that are not UTF-8 compare (and fail) as bytes, not a 500
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token)


@dataclass(frozen=True)
class CookieLogin:
    """One surface's login cookie: its name, path and the label its MAC is keyed under."""

    cookie: str  # the cookie's name
    path: str  # where the browser sends it ("/ops", "/")
    label: bytes  # what the MAC signs before the expiry: one per surface
    ttl_s: int = LOGIN_TTL_S

    def _mac(self, token: bytes, expires: str) -> str:
        return hmac.new(token, self.label + expires.encode("ascii"), hashlib.sha256).hexdigest()

    def value(self, token: bytes, now: float) -> str:
        """What the cookie holds when issued at ``now``: ``<expiry>.<MAC of it>``."""
        expires = str(int(now + self.ttl_s))
        return f"{expires}.{self._mac(token, expires)}"

    def refusal(self, token: bytes, value: str, now: float) -> int | None:
        """None for a cookie this login issued that has not expired; else the status:
        :data:`EXPIRED` (log in again) or :data:`FORGED` (not one it issued)."""
        expires, _, mac = value.partition(".")
        if not (expires.isascii() and expires.isdigit()):
            return FORGED
        signed = hmac.compare_digest(
            mac.encode("utf-8", "surrogateescape"), self._mac(token, expires).encode()
        )
        if not signed:
            return FORGED
        return None if now < int(expires) else EXPIRED

    def carried(self, request: web.Request, token: bytes) -> bool:
        """Whether ``request`` carries a valid, unexpired cookie of this login."""
        value = request.cookies.get(self.cookie)
        return value is not None and self.refusal(token, value, time.time()) is None

    def set_on(self, response: web.StreamResponse, token: bytes, *, secure: bool) -> None:
        """Give the browser the login: HttpOnly (no script reads it), SameSite=Strict (no
        other site's page sends it), ``secure`` on https or behind a TLS proxy."""
        response.set_cookie(
            self.cookie,
            self.value(token, time.time()),
            max_age=self.ttl_s,
            path=self.path,
            httponly=True,
            samesite="Strict",
            secure=secure,
        )


def without_token(
    request: web.Request, headers: dict[str, str], drop: tuple[str, ...] = (), **extra: str
) -> web.Response:
    """A 303 to the same page without ``?token=`` (the caller sets the login on it);
    ``drop``: other query parameters left out, ``extra``: ones added (the web chat flags a
    wrong token so)."""
    gone = {"token", *drop, *extra}
    rest = [(k, v) for k, v in request.query.items() if k not in gone]
    target = request.rel_url.with_query([*rest, *extra.items()])
    return web.Response(status=303, headers={**headers, "Location": str(target)})
