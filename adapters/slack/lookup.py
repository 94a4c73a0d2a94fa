"""Finding whether a reply already landed on Slack, so an unclear failure never turns into a
blind duplicate.

Every ``chat.postMessage`` carries its reply key in the message metadata, so after an
unclear failure (the connection dropped, Slack answered 5xx) the thread is searched for it
before the message is sent again. Slack may still be carrying out a request the client gave
up on (its timeout, ``api_timeout_s``, fired while Slack was slow): a search made then, a
second later, does not find the reply yet, and a resend would post it twice once the first
request lands. So after an unclear failure "not there" is believed only
``IN_FLIGHT_GRACE_S`` after it: a search before that that finds nothing waits until then
(asyncio, bounded) and searches again. The same search is the core's
:class:`~bridge.ports.ConfirmsDelivery` hook (the surface's ``find_sent``), so a reply found
undelivered after a crash is looked up before it is sent again. A file has no metadata: an
upload whose answer was lost is looked for by its name and size among the files posted
since; after a crash it is uploaded again (at least once). Apart from the surface because
this bookkeeping of requests in doubt, and the search, are a job of their own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bridge.ports import DeliveryError

from .errors import CALL_ERRORS, slack_error
from .ratelimit import RateLimits

log = logging.getLogger(__name__)

METADATA_EVENT = "jazz_bridge_reply"
LOOKUP_PAGES = 10  # conversations.replies/history pages searched for a reply key
CLOCK_SKEW_S = 60.0  # an upload in doubt is looked for among files posted since (this much)
# after an unclear failure (no answer in api_timeout_s, a dropped connection, a 5xx), how
# long Slack may still be carrying the request out: a search sooner that finds nothing is
# made again then, before the reply is sent again
IN_FLIGHT_GRACE_S = 10.0


def _slack_time(ts: object) -> float:
    """A message ts ("1764670300.000100") as seconds since the epoch; 0 when it is not one."""
    try:
        return float(str(ts))
    except ValueError:
        return 0.0


class ReplyLookup:
    """The replies of one surface whose request ended unclear, and the search for them."""

    def __init__(self, client: AsyncWebClient, limits: RateLimits) -> None:
        self.client = client
        self._limits = limits
        self._unclear: dict[str, tuple[str, str | None]] = {}  # reply key -> channel, thread
        # reply key -> (file name, size, when it was sent) of an upload that failed in a way
        # that may have landed: a file message has no metadata, so it is found by its file
        self._uploads_in_doubt: dict[str, tuple[str, int, float]] = {}
        # reply key -> monotonic time until which Slack may still carry out its unclear
        # request (post or upload): "not there" is not believed before then
        self._in_flight_until: dict[str, float] = {}
        # reply key -> wall-clock time of its unclear request: the search for it starts
        # there (``oldest``), or a thread longer than LOOKUP_PAGES pages is never reached
        self._unclear_since: dict[str, float] = {}
        # a reply found in doubt at start may be one the previous process was posting when
        # it died: Slack may still be carrying that out, so "not there" is believed only
        # IN_FLIGHT_GRACE_S after this surface was made
        self._started = time.monotonic()

    def in_doubt(self, reply_key: str) -> bool:
        """Did the post of ``reply_key`` fail unclearly (so it is looked for before a resend)?"""
        return reply_key in self._unclear

    def post_unclear(
        self, reply_key: str, channel: str, thread_ts: str | None, sent_at: float
    ) -> None:
        """The post of ``reply_key`` (made at wall-clock ``sent_at``) may have landed."""
        self._unclear[reply_key] = (channel, thread_ts)
        self._in_flight_until[reply_key] = time.monotonic() + IN_FLIGHT_GRACE_S
        self._unclear_since.setdefault(reply_key, sent_at)

    def posted(self, reply_key: str) -> None:
        """The post of ``reply_key`` landed: nothing of it is in doubt any more."""
        self._unclear.pop(reply_key, None)
        self._in_flight_until.pop(reply_key, None)
        self._unclear_since.pop(reply_key, None)

    def upload_unclear(self, reply_key: str, name: str, size: int, sent_at: float) -> None:
        """The upload of ``reply_key`` (the file ``name`` of ``size`` bytes, sent at
        wall-clock ``sent_at``) may have landed."""
        self._uploads_in_doubt[reply_key] = (name, size, sent_at)
        self._in_flight_until[reply_key] = time.monotonic() + IN_FLIGHT_GRACE_S
        self._unclear_since.setdefault(reply_key, sent_at)

    def uploaded(self, reply_key: str) -> None:
        """The upload of ``reply_key`` landed: nothing of it is in doubt any more."""
        self._uploads_in_doubt.pop(reply_key, None)
        self._in_flight_until.pop(reply_key, None)
        self._unclear_since.pop(reply_key, None)

    def forget_post(self, reply_key: str) -> None:
        """The core asks itself (``find_sent``): :meth:`in_doubt` no longer holds a resend."""
        self._unclear.pop(reply_key, None)

    def _matches(self, msg: dict[str, Any], channel: str, reply_key: str) -> str | None:
        """``msg``'s reference if it is the reply with ``reply_key``: by its metadata, or,
        for an upload in doubt (files carry no metadata), a file of the same name and size."""
        meta = msg.get("metadata") or {}
        payload = meta.get("event_payload") or {}
        if meta.get("event_type") == METADATA_EVENT and payload.get("reply_key") == reply_key:
            return f"{channel}:{msg['ts']}"
        upload = self._uploads_in_doubt.get(reply_key)
        if upload is not None and _slack_time(msg.get("ts")) >= upload[2] - CLOCK_SKEW_S:
            for file in msg.get("files") or []:
                if (file.get("name"), file.get("size")) == upload[:2] and file.get("id"):
                    return f"{channel}:{file['id']}"
        return None

    async def find(
        self, team: str, channel: str, thread_ts: str | None, reply_key: str
    ) -> str | None:
        """Search the thread (or the channel's newest messages) for the reply (see
        :meth:`_matches`). None only when Slack said it is not there, and its unclear request
        can no longer be under way (else the search waits for that and is made again); a
        failed search raises :class:`DeliveryError` (the caller asks again rather than post
        twice). A search Slack refuses for good (the app has no history scope) can never
        tell: that is raised as a passing failure, and the reply is no longer held for a
        search, so the core's last try sends it (a second copy beats no answer at all)
        rather than the answer failing over a search it did not need."""
        found = await self._search_once(team, channel, thread_ts, reply_key)
        until = self._in_flight_until.get(reply_key, self._started + IN_FLIGHT_GRACE_S)
        wait = until - time.monotonic()
        if found is None and wait > 0:
            log.info(
                "slack: reply %s not found yet after an unclear request; Slack may still be "
                "carrying it out: looking again in %.1fs",
                reply_key,
                wait,
            )
            await asyncio.sleep(wait)  # waiting out Slack's work on it, not synchronisation
            found = await self._search_once(team, channel, thread_ts, reply_key)
        # found, or Slack says it is not there when it can no longer be on its way
        self._unclear.pop(reply_key, None)
        self._uploads_in_doubt.pop(reply_key, None)
        self._in_flight_until.pop(reply_key, None)
        self._unclear_since.pop(reply_key, None)
        return found

    async def _search_once(
        self, team: str, channel: str, thread_ts: str | None, reply_key: str
    ) -> str | None:
        """:meth:`_search`, with a refusal for good turned into "cannot tell" (passing), the
        reply no longer held for a search (see :meth:`find`)."""
        try:
            return await self._search(team, channel, thread_ts, reply_key)
        except DeliveryError as exc:
            if not exc.permanent:
                raise
            self._unclear.pop(reply_key, None)
            log.warning(
                "slack: cannot tell whether reply %s landed: Slack refuses to search the "
                "conversation (%s); grant the app the history scopes, or it may be sent twice",
                reply_key,
                exc,
            )
            raise DeliveryError(f"cannot tell whether reply {reply_key} landed: {exc}") from exc

    async def _search(
        self, team: str, channel: str, thread_ts: str | None, reply_key: str
    ) -> str | None:
        """One search of the thread (or the channel's newest messages) for the reply: its
        reference, None when Slack says it is not there; :class:`DeliveryError` when the
        search failed or could not reach far enough back."""
        method = "conversations.replies" if thread_ts else "conversations.history"
        cursor: str | None = None
        since = self._unclear_since.get(reply_key)
        # only what was posted since the unclear request (a clock apart): a reply made
        # after a crash has no such time, and is looked for among all of them
        oldest = f"{since - CLOCK_SKEW_S:.6f}" if since is not None else None
        for _page in range(LOOKUP_PAGES):
            self._limits.gate(method, team)
            try:
                if thread_ts:
                    response = await self.client.conversations_replies(
                        channel=channel,
                        ts=thread_ts,
                        include_all_metadata=True,
                        limit=200,
                        cursor=cursor,
                        oldest=oldest,
                    )
                else:  # newest first: a reply in doubt is among the latest
                    response = await self.client.conversations_history(
                        channel=channel,
                        include_all_metadata=True,
                        limit=200,
                        cursor=cursor,
                        oldest=oldest,
                    )
            except CALL_ERRORS as exc:
                self._limits.note(method, team, exc)
                log.info("could not check whether reply %s landed: %s", reply_key, exc)
                raise slack_error(exc, method) from exc
            for msg in response.get("messages") or []:
                found = self._matches(msg, channel, reply_key)
                if found is not None:
                    return found
            cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
            if not response.get("has_more") or not cursor:
                return None  # Slack says it is not there
        where = "replies of the thread" if thread_ts else "messages of the conversation"
        raise DeliveryError(
            f"{method}: reply {reply_key} not found in the {LOOKUP_PAGES * 200} newest {where}; "
            "cannot tell whether it landed"
        )
