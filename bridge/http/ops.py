"""The operators' read-only web view at ``/ops``: conversations, their runs and transcripts.

The same answers as ``jazz-bridge homes list`` and ``homes show`` (both come from
:class:`bridge.operators.Operators`), for an operator who has a browser rather than a shell
on the gateway's host. It is mounted only when ``ops.token`` is configured (else ``/ops``
is 404). The token is given as ``Authorization: Bearer <token>`` or once as
``?token=<token>``: then the page sets an HttpOnly, SameSite=Strict cookie (its expiry
signed with the token, not the token: :mod:`bridge.http.login`) that lasts ``COOKIE_TTL_S``
and redirects to the same page without it, so links work and the token does not stay in the
address bar or history. Another Authorization scheme (a proxy's ``Basic`` password) is not
the operator's token and is left alone. Every comparison is constant-time, and wrong tokens
are limited per address (429 past a few a minute,
:class:`~bridge.http.login.FailedLogins`). Everything shown is escaped (thread keys and
texts are user input); a transcript's Markdown is rendered by :mod:`.ops_markdown`, which
lets no HTML of the text's own through; and the pages carry a Content-Security-Policy that
allows no script at all. Columns are named for people (:data:`bridge.operators.LABELS`),
sizes are human-readable (the exact bytes in a tooltip), and a run a person stopped reads
"stopped by Ada (Stop button)", not as a failure.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from html import escape
from typing import Any

from aiohttp import web
from pydantic import SecretStr

from ..errors import ConfigError
from ..logs import mask
from ..operators import (
    LIST_COLUMNS,
    OPS_SIZE_TTL_S,
    Operators,
    cell_text,
    human_size,
    label,
    run_outcome_text,
)
from .login import (
    LIMITED,
    CookieLogin,
    FailedLogins,
    client_address,
    limited_text,
    token_matches,
    without_token,
)
from .ops_markdown import render as render_markdown

log = logging.getLogger(__name__)

PREFIX = "/ops"
# the label as it always was: a login issued before the cookie code was shared still works
LOGIN = CookieLogin(cookie="jazz_bridge_ops", path=PREFIX, label=b"jazz-bridge ops cookie ")
COOKIE = LOGIN.cookie
COOKIE_TTL_S = LOGIN.ttl_s
BEARER = "bearer "
TRANSCRIPT_LIMIT = 500
RECENT_RUNS = 50
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "form-action 'none'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f3} .num{text-align:right} .msg{max-width:60em;overflow-wrap:anywhere}
.msg>:first-child{margin-top:0} .msg>:last-child{margin-bottom:0} .msg p{margin:.4em 0}
.msg pre{background:#f6f6f6;padding:.4em;overflow-x:auto;white-space:pre-wrap}
.msg table{margin:.4em 0}
.msg blockquote{margin:.4em 0;padding-left:.8em;border-left:3px solid #ccc}
.role-user{background:#eef5ff} .role-error,.failed{background:#fff0f0}
.role-stopped,.stopped{background:#f4f4f4;color:#444} code{font-size:13px}
.num,.when{white-space:nowrap}
"""
WHEN_KEYS = frozenset({"created", "lastActive", "started", "at"})  # times: kept on one line
STOPPED_ROLE = "stopped"  # a person's Stop: the reply that said so, shown neutral

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _bearer(header: str) -> str | None:
    """The token of a ``Bearer`` Authorization (scheme in any case), else None."""
    if header[: len(BEARER)].lower() != BEARER:
        return None
    return header[len(BEARER) :].strip()


def _page(title: str, body: str) -> web.Response:
    html = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>"
        f"<body>{body}</body></html>"
    )
    return web.Response(text=html, content_type="text/html", headers=HEADERS)


def _text(value: Any) -> str:
    """``value`` as page text: every configured secret masked (a run's error may quote the
    provider key it was given; the chat's reply and the log mask it too), then escaped."""
    return escape(mask(str(value)))


def _cell(value: Any, key: str = "") -> str:
    """One table cell of ``value`` (of ``key`` of ``homes list``/``show``): as the CLI's
    text shows it (yes/no, a human-readable size whose bytes are in its tooltip)."""
    if value is None:
        return "<td></td>"
    if isinstance(value, bool):
        return f"<td>{cell_text(key, value)}</td>"
    if key == "sizeBytes" and isinstance(value, int):
        return f'<td class=num title="{value} bytes">{escape(human_size(value))}</td>'
    if isinstance(value, int | float):
        return f"<td class=num>{escape(cell_text(key, value))}</td>"
    css = " class=when" if key in WHEN_KEYS else ""
    return f"<td{css}>{_text(cell_text(key, value))}</td>"


def _table(columns: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    """A table whose header names ``columns`` (keys, shown by their labels; no header when
    every one is empty)."""
    names = [label(c) for c in columns]
    head = "".join(f"<th>{escape(n)}</th>" for n in names)
    thead = f"<thead><tr>{head}</tr></thead>" if any(names) else ""  # none: rows name themselves
    body = "".join("<tr>" + "".join(r) + "</tr>" for r in rows)
    return f"<table>{thead}<tbody>{body}</tbody></table>"


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


class OpsView:
    def __init__(self, operators: Operators, token: SecretStr, *, secure_cookie: bool) -> None:
        self.operators = operators
        self._token = token.get_secret_value().encode()
        self._secure_cookie = secure_cookie
        self.failures = FailedLogins()  # wrong tokens per address: a bearer or ?token=

    def _check(self, request: web.Request) -> web.StreamResponse | None:
        """None when authorized; else the refusal (401 no token, 403 wrong one) or a redirect."""
        bearer = _bearer(request.headers.get("Authorization", ""))
        given = bearer if bearer is not None else request.query.get("token")
        if given is not None:  # a token given: limited per address (FailedLogins)
            wait = self.failures.retry_after(client_address(request))
            if wait is not None:  # not compared: the answer tells a guesser nothing
                return self._limited(wait)
            if not token_matches(self._token, given):
                self.failures.failed(client_address(request))
                return self._refuse(403)
        if bearer is not None:  # another scheme (a proxy's Basic) is not ours: not refused
            return None
        if "token" in request.query:
            # Keep it in a cookie and drop it from the address bar.
            response = without_token(request, HEADERS)
            # https, or behind a TLS proxy
            LOGIN.set_on(response, self._token, secure=request.secure or self._secure_cookie)
            return response
        cookie = request.cookies.get(COOKIE)
        if cookie is not None:
            status = LOGIN.refusal(self._token, cookie, time.time())
            return None if status is None else self._refuse(status)
        return self._refuse(401)

    @staticmethod
    def _limited(retry_after: int) -> web.Response:
        headers = {**HEADERS, "Retry-After": str(retry_after)}
        return web.Response(status=LIMITED, text=limited_text(retry_after), headers=headers)

    @staticmethod
    def _refuse(status: int) -> web.Response:
        text = (
            "missing (or expired) operator login: open /ops?token=... or send "
            "Authorization: Bearer ..."
            if status == 401
            else "wrong operator token"
        )
        headers = {**HEADERS, "WWW-Authenticate": 'Bearer realm="jazz-bridge ops"'}
        return web.Response(status=status, text=text, headers=headers)

    def guarded(self, handler: Handler) -> Handler:
        async def wrapper(request: web.Request) -> web.StreamResponse:
            refusal = self._check(request)
            if refusal is not None:
                if refusal.status in (401, 403, LIMITED):
                    log.warning("ops view: refused %s (%d)", request.remote, refusal.status)
                return refusal
            return await handler(request)

        return wrapper

    @staticmethod
    def _run_cell(run: dict[str, Any], key: str) -> str:
        if key == "outcome":
            return _run_outcome_cell(run)
        if key == "error" and run["stoppedBy"]:
            return "<td></td>"  # what the runner said as it was stopped: not a failure
        return _cell(run[key], key)

    async def listing(self, request: web.Request) -> web.StreamResponse:
        platform = request.query.get("platform") or None
        rows = await self.operators.listing(platform=platform)
        convs = {c.thread_key: c.id for c in await self.operators.store.conversations()}
        cells = []
        for row in rows:
            line = []
            for col in LIST_COLUMNS:
                if col == "threadKey":
                    link = f"{PREFIX}/c/{convs[row[col]]}"
                    line.append(f'<td><a href="{escape(link)}">{escape(row[col])}</a></td>')
                else:
                    line.append(_cell(row[col], col))
            cells.append(line)
        body = (
            "<h1>Conversations</h1>"
            f"<p>{len(rows)} conversation(s). {label('costUSD')} adds up the runs whose cost "
            f"the runner reported; {label('unpricedRuns')} are those whose cost it did not. "
            f"{label('sizeBytes')} is measured at most every {OPS_SIZE_TTL_S / 60:.0f} "
            "minutes; an archived home's is its archive file's.</p>" + _table(LIST_COLUMNS, cells)
        )
        return _page("jazz-bridge: conversations", body)

    async def conversation(self, request: web.Request) -> web.StreamResponse:
        conv = await self.operators.store.conversation(int(request.match_info["id"]))
        if conv is None:
            return web.Response(status=404, text="no such conversation", headers=HEADERS)
        data = await self.operators.show(conv, recent=RECENT_RUNS)
        hidden = ("recentRuns", "pendingPrompts", "transcript", "workspace", "archive", "restore")
        meta = [
            [f"<th>{escape(label(k))}</th>", _cell(v, k)]
            for k, v in data.items()
            # archived: no home there; the archive's path and size are said below
            if k not in hidden and not (data["archived"] and k in ("home", "sizeBytes"))
        ]
        run_cols = [
            "id",
            "requester",
            "started",
            "outcome",
            "durationMs",
            "tokens",
            "cost",
            "error",
        ]
        runs = [[self._run_cell(r, c) for c in run_cols] for r in data["recentRuns"]]
        prompts = [
            [_cell(p[c], c) for c in ("kind", "requester", "created")]
            for p in data["pendingPrompts"]
        ]
        lines = await self.operators.store.transcript(conv.thread_key, limit=TRANSCRIPT_LIMIT)
        # the replies that said "Stopped by ...": of runs a person stopped (the latest runs
        # cover the latest lines: each line is one of a message or of its run's replies)
        recorded = await self.operators.store.runs(conv.id, limit=TRANSCRIPT_LIMIT)
        stopped = {r.message_id for r in recorded if r.outcome is not None and r.outcome.stopped_by}
        transcript = []
        for e in lines:
            role = STOPPED_ROLE if e.role == "error" and e.message_id in stopped else e.role
            transcript.append(
                [
                    _cell(_when(e.at), "at"),
                    f"<td class='role-{escape(role)}'>{escape(role)}</td>",
                    _cell(e.sender),
                    f"<td class=msg>{render_markdown(mask(e.text))}</td>",
                ]
            )
        if data["archived"]:
            where = (
                f"<p>This home is archived: its files are packed in <code>"
                f"{escape(data['archive'])}</code> ({escape(human_size(data['sizeBytes']))})"
                ", Jazz's own transcript with them. Restore it with <code>"
                f"{escape(data['restore'])}</code>; the table below is the gateway's record "
                "of what people sent and what was replied.</p>"
            )
        else:
            where = (
                f"<p>Jazz's own transcript of this conversation is under <code>"
                f"{escape(str(data['transcript']))}</code> (conversation "
                f"<code>{escape(str(data['jazzConversation']))}</code>); the table below is "
                "the gateway's record of what people sent and what was replied.</p>"
            )
        body = (
            f'<p><a href="{PREFIX}">All conversations</a></p>'
            f"<h1>{escape(conv.thread_key)}</h1>"
            + _table(["", ""], meta)
            + where
            + f"<h2>Runs (latest {RECENT_RUNS})</h2>"
            + _table(run_cols, runs)
            + f"<h2>Pending prompts ({len(prompts)})</h2>"
            + _table(["kind", "requester", "created"], prompts)
            + f"<h2>Transcript (latest {TRANSCRIPT_LIMIT} lines)</h2>"
            + _table(["at", "role", "sender", "text"], transcript)
        )
        return _page(f"jazz-bridge: {conv.thread_key}", body)


def _run_outcome_cell(run: dict[str, Any]) -> str:
    """A run's outcome: a person's Stop neutral ("stopped by Ada (Stop button)"), a
    failure marked as one."""
    outcome = run["outcome"]
    css = "stopped" if run["stoppedBy"] else "" if outcome in ("ok", "in flight") else "failed"
    attr = f" class={css}" if css else ""
    return f"<td{attr}>{_text(run_outcome_text(run))}</td>"


def add_ops_routes(
    app: web.Application, operators: Operators, token: SecretStr, *, secure_cookie: bool = False
) -> None:
    """Mount the operator view (only call this when a token is configured)."""
    if not token.get_secret_value():
        raise ConfigError("ops.token is empty: set a long random token or leave it unset")
    view = OpsView(operators, token, secure_cookie=secure_cookie)
    app.router.add_get(PREFIX, view.guarded(view.listing))
    app.router.add_get(PREFIX + "/", view.guarded(view.listing))
    # ASCII digits, at most 18 (\\d also takes other scripts' digits; SQLite ids are 64-bit)
    app.router.add_get(PREFIX + r"/c/{id:[0-9]{1,18}}", view.guarded(view.conversation))
