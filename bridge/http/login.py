"""A login kept in a cookie: the token given once, then an expiry signed with it.

The operator view (:mod:`bridge.http.ops`) and the web chat's page (``adapters/web``) both
take their token once (``?token=`` or a form) and keep the login in an HttpOnly,
SameSite=Strict cookie, so the token stays out of the address bar, the history and every
later request. The cookie holds its expiry and a MAC of it keyed by the token (never the
token itself): a copied cookie stops working when it expires and its holder cannot make it
last longer; changing the token ends every login. Each login's MAC has a label of its own,
so one surface's cookie is never another's even when both have the same token. Every
comparison is constant-time.

Wrong tokens are limited per client address (:class:`FailedLogins`): a long random token
cannot be guessed anyway, but nothing should let anyone try at the speed of the network.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

LOGIN_TTL_S = 12 * 3600  # a login lasts a working day; then the token again
EXPIRED = 401  # a cookie this login issued, past its expiry: log in again
FORGED = 403  # a cookie this login did not issue (or for another token)
LIMITED = 429  # too many wrong tokens from this address lately: try again after Retry-After
# wrong tokens one client address may give in any LOGIN_WINDOW_S; after that every token it
# gives (the right one too: else guessing would go on, told apart by the answer) is refused
# until the oldest of them is that old
LOGIN_FAILURES_ALLOWED = 10
LOGIN_WINDOW_S = 60.0
# addresses remembered (the least recently failing forgotten first): memory stays bounded
# whatever number of addresses a client has (IPv6 gives one many)
LOGIN_ADDRESSES_KEPT = 4096


def token_matches(token: bytes, given: str) -> bool:
    """Whether ``given`` is ``token``, in constant time."""
    # surrogateescape: bytes that are not UTF-8 compare (and fail) as bytes, not a 500
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token)


class FailedLogins:
    """Wrong tokens per client address in a sliding window (:data:`LOGIN_FAILURES_ALLOWED` in
    any :data:`LOGIN_WINDOW_S`). A right token is never counted; once an address has used its
    wrong tries, every token it gives is refused (429, :meth:`retry_after` seconds) without
    being compared, so the answer tells a guesser nothing. Behind a proxy every client has
    the proxy's address (one client's typos then hold up the others for a minute)."""

    def __init__(
        self,
        allowed: int = LOGIN_FAILURES_ALLOWED,
        window_s: float = LOGIN_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.allowed = allowed
        self.window_s = window_s
        self.clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, address: str) -> deque[float] | None:
        """``address``'s failures still in the window (older ones dropped), or None."""
        failures = self._failures.get(address)
        if failures is None:
            return None
        horizon = self.clock() - self.window_s
        while failures and failures[0] <= horizon:
            failures.popleft()
        if not failures:
            del self._failures[address]
            return None
        return failures

    def retry_after(self, address: str) -> int | None:
        """Seconds until ``address`` may give a token again (at least 1), or None when it may
        now."""
        failures = self._recent(address)
        if failures is None or len(failures) < self.allowed:
            return None
        return max(1, math.ceil(failures[0] + self.window_s - self.clock()))

    def failed(self, address: str) -> None:
        """Count a wrong token from ``address``."""
        failures = self._recent(address)
        if failures is None:
            failures = self._failures[address] = deque(maxlen=self.allowed)
        failures.append(self.clock())
        self._failures.move_to_end(address)
        while len(self._failures) > LOGIN_ADDRESSES_KEPT:
            self._failures.popitem(last=False)


def client_address(request: web.Request) -> str:
    """The address wrong tokens are counted under (the peer's; "?" when unknown)."""
    return request.remote or "?"


def limited_text(retry_after: int) -> str:
    """What a client refused by :class:`FailedLogins` is told."""
    return (
        f"too many wrong tokens from this address: no token is checked from it for "
        f"{retry_after} s (Retry-After); then give the right one"
    )


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
