"""Slack's message events to the core: which conversation a message is, whether the
bot answers it, and the :class:`~bridge.model.Inbound` handed to ``gateway.submit``.

Framework-neutral on purpose (the way slack-bolt keeps its HTTP adapters thin around one
app): the same converter takes an event from the HTTP fast path (:mod:`.routes`, which
skips bolt's dispatch for message events) and from bolt's listener in Socket Mode. What a
message *says* (its text, blocks, files, forwards) is :mod:`.content`'s.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from bridge.model import Inbound
from bridge.ports import AdapterContext, SubmitStatus

from . import content
from .access import PLATFORM, Access, count
from .surface import SlackSurface

log = logging.getLogger(__name__)

PERSON_SUBTYPES = frozenset({"file_share", "thread_broadcast"})
SLACK_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")  # U0123ABC, C0123ABC, T0123ABC, 1764669600.000100


class EventIntake:
    """One message event to the core: converted, allowed or not, submitted."""

    def __init__(self, ctx: AdapterContext, access: Access, surface: SlackSurface) -> None:
        self.ctx = ctx
        self.access = access
        self.surface = surface
        self.bot_user_id: str | None = None  # auth.test's, once the adapter is initialized

    def bot_id(self, body: dict[str, Any], known: str | None = None) -> str | None:
        """The bot's user id: ``known`` (bolt's context), auth.test's, or the payload's."""
        found = known or self.bot_user_id
        if found:
            return str(found)
        for auth in body.get("authorizations") or []:
            if isinstance(auth, dict) and auth.get("is_bot") and auth.get("user_id"):
                return str(auth["user_id"])
        return None

    async def receive(
        self, body: dict[str, Any], known_bot: str | None = None
    ) -> SubmitStatus | None:
        """Convert and submit one ``event_callback`` body; the submit's status, None when
        the event was not for the core. Returns only after the inbox write."""
        inbound = await self.convert(body, self.bot_id(body, known_bot))
        if inbound is None:
            return None
        result = await self.ctx.gateway.submit(inbound)
        return result.status

    async def convert(self, body: dict[str, Any], bot: str | None) -> Inbound | None:
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
        raw_text = str(event.get("text") or "") or content.blocks_text(event.get("blocks"))
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
        if not self.access.allowed(user_team, channel, user):
            log.info(
                "slack: ignored %s from %s of %s in %s/%s (not allowed)",
                kind,
                user,
                user_team,
                team,
                channel,
            )
            count(self.ctx.metrics, "denied")
            return None
        shared = content.shared(event)
        attachments = content.attachments(event)
        attachments += tuple(a for item in shared for a in content.attachments(item))
        text = content.with_forwarded(content.prompt_text(raw_text, bot), shared)
        missing = content.unavailable(event)
        missing += [n for item in shared for n in content.unavailable(item)]
        if missing:
            note = content.unavailable_note(missing)
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
            is_operator=self.access.is_operator(user),
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
        count(self.ctx.metrics, "ignored")
        return None


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
