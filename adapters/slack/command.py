"""The ``/jazz`` slash command: ``new``, ``status``, ``stop`` and ``help`` from a channel or DM.

Slack sends no slash command from inside a thread, so ``/jazz`` acts on the channel's most
recently active conversation (a DM's own in a DM) and answers in its ack, which only the
person sees; in a thread the same commands are written ``!new`` and so on (:mod:`.content`).
A command is sent once, never again: one the store could not write is said so in the ack.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from slack_bolt.response import BoltResponse

from bridge.model import Inbound
from bridge.ports import AdapterContext, SubmitStatus
from bridge.presses import NOT_ALLOWED_TEXT
from bridge.store import StoreError, StoreFull

from .access import PLATFORM, Access, count
from .content import escape, unescape
from .intake import SLACK_ID

log = logging.getLogger(__name__)

SLASH_COMMANDS = frozenset({"new", "status", "stop"})
SLASH_HELP = (
    "Mention me in a channel to start a conversation in a thread; in the thread write "
    "`!new`, `!status`, `!stop` or `!help` (Slack has no slash commands in threads). "
    "`/jazz new|status|stop` in a channel acts on its most recently active conversation "
    "(in a DM, on the DM's own), and `/jazz new <message>` starts the fresh one with it; "
    "`/jazz help` shows this."
)
# said only to the person (an ephemeral message, a command's ack), as Telegram's alert says it
NOT_STORED_FULL = "The gateway's disk is full: this was NOT stored or done; send it again later."
NOT_STORED = "The gateway cannot store this right now: it was NOT done; send it again."


class SlashCommand:
    """``/jazz`` to the core, as the command message of the conversation it acts on."""

    def __init__(self, ctx: AdapterContext, access: Access) -> None:
        self.ctx = ctx
        self.access = access

    async def on_command(self, ack: Any, body: dict[str, Any]) -> BoltResponse | None:
        # Slack escapes &, < and > in a command's text as in a message's
        words = unescape(str(body.get("text") or "")).split(maxsplit=1)
        word = words[0].lower().lstrip("!/") if words else "help"
        # "/jazz new <question>": the fresh conversation starts with it, as "!new <question>"
        rest = words[1].strip() if len(words) > 1 and word == "new" else ""
        if word not in SLASH_COMMANDS:
            unknown = f"Unknown command `{escape(word)}`. {SLASH_HELP}"
            await ack(SLASH_HELP if word == "help" else unknown)
            return None
        team, channel = str(body.get("team_id") or ""), str(body.get("channel_id") or "")
        user = str(body.get("user_id") or "")
        if not all(SLACK_ID.match(v) for v in (team, channel, user)):
            await ack("That command came without a team, channel or user.")
            return None
        if not self.access.allowed(team, channel, user):
            log.info(
                "slack: ignored /jazz %s from %s in %s/%s (not allowed)", word, user, team, channel
            )
            count(self.ctx.metrics, "denied")
            await ack(NOT_ALLOWED_TEXT)  # only they see a command's ack
            return None
        found = await self._conversation(team, channel, body)
        if found is None:
            await ack(
                "No conversation here yet: mention me in a channel, or message me directly, "
                "to start one."
            )
            return None
        key, target = found
        inbound = Inbound(
            platform=PLATFORM,
            event_id=f"command:{body.get('trigger_id') or time.time_ns()}",
            thread_key=key,
            sender_id=user,
            sender_name=f"<@{user}>",
            text=f"/{word} {rest}" if rest else f"/{word}",
            shared_chat=not _is_dm(channel, body.get("channel_name")),
            is_operator=self.access.is_operator(user),
            target=target,
        )
        try:
            result = await self.ctx.gateway.submit(inbound)
        except StoreError as exc:  # Slack never sends a command again: said, as the web chat's
            log.error("slack: /jazz %s not stored: %s", word, exc)
            await ack(NOT_STORED_FULL if isinstance(exc, StoreFull) else NOT_STORED)
            return None
        if result.status is SubmitStatus.REFUSED:
            await ack("The gateway is restarting; try again in a minute.")
            return None
        where = "here" if target.get("thread_ts") is None else "in the conversation's thread"
        await ack(f"`/jazz {word}`: the answer is {where}.")
        return None

    async def _conversation(
        self, team: str, channel: str, body: dict[str, Any]
    ) -> tuple[str, dict[str, Any]] | None:
        """A DM's own conversation, or the channel's most recently active thread; None when
        there is none yet. Only a DM with the bot has one (the bot hears only its own DMs):
        in a DM between two people ``/jazz`` still reaches the app, but a reply posted
        there would be refused (the bot is not in it) and the answer lost."""
        if _is_dm(channel, body.get("channel_name")):
            key = f"slack:{team}:{channel}"
            if await self.ctx.store.conversation_by_key(key) is None:
                return None
            return key, {"team": team, "channel": channel, "thread_ts": None}
        prefix = f"slack:{team}:{channel}:"
        latest = await self.ctx.store.latest_conversation(prefix)
        if latest is None:
            return None
        thread_ts = latest.thread_key[len(prefix) :]
        return latest.thread_key, {"team": team, "channel": channel, "thread_ts": thread_ts}


def _is_dm(channel: str, channel_name: Any) -> bool:
    return channel_name == "directmessage" or channel.startswith("D")
