"""``POST /slack/events`` on the gateway's aiohttp server: the HTTP mode's one route.

Thin around the framework-neutral parts, as slack-bolt's own aiohttp adapter is around its
app: the headers are checked before the body is read (:func:`bridge.http.server.gate_bodies`),
then the signature over the raw bytes and the body's shape (:mod:`.guard`). A message
event goes straight to :class:`~.intake.EventIntake`; everything else (``url_verification``,
button presses, ``/jazz``) is handed to bolt's ``AsyncApp`` as a bolt request.
"""

from __future__ import annotations

import logging

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest

from bridge.ports import AdapterContext, SubmitStatus

from . import guard
from .access import PLATFORM, count
from .intake import EventIntake

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
REFUSED = "the gateway is shutting down; retry"  # a 503: Slack delivers the event again


class EventsRoute:
    """The events endpoint's handler and its header gate."""

    def __init__(self, ctx: AdapterContext, intake: EventIntake) -> None:
        self.ctx = ctx
        self.intake = intake
        self.app: AsyncApp | None = None  # bolt's, once the adapter is initialized

    def refusal(self, request: web.Request) -> web.Response | None:
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
        if self.app is None:
            return web.Response(status=503, text="not started")
        raw = await request.read()  # over server.max_body_bytes: 413 (the server counts it)
        secret = self.ctx.settings.signing_secret
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
            count(self.ctx.metrics, "malformed")
            return web.Response(status=400, text=f"not a Slack request: {problem}")
        if body.get("type") == "event_callback":
            # A message event needs no more of bolt than a converter: the bot's id is known
            # since start() (else in the payload's authorizations), self events are dropped
            # by EventIntake.convert, and nothing answers in the ack. Routing it through
            # bolt's dispatch (a Web API client built per request, middleware, matchers,
            # kwargs) was most of the CPU an event cost. Everything else (url_verification,
            # buttons, /jazz) and socket mode go through bolt.
            return _event_response(await self.intake.receive(body))
        # bolt re-parses the text it is given: a form body goes to it as the JSON of what
        # guard.parse read (bolt's own form parsing misreads any form holding "payload")
        bolt_request = AsyncBoltRequest(
            body=guard.bolt_text(raw, request.content_type, body),
            query=request.query_string,
            headers=dict(request.headers),
        )
        bolt_response = await self.app.async_dispatch(bolt_request)
        return await to_aiohttp_response(bolt_response)


def _event_response(status: SubmitStatus | None) -> web.Response:
    if status is SubmitStatus.REFUSED:
        return web.Response(status=503, text=REFUSED)
    return web.Response(status=200)
