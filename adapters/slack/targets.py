"""Where a Slack reply goes: the channel and thread of a :class:`~bridge.model.ReplyTarget`,
the workspace it counts against (Slack's rate limits are per workspace), and a posted
message's reference (``channel:ts``) taken apart.

Apart from the surface because posts, edits, uploads and the status indicator all read
their target the same way.
"""

from __future__ import annotations

from bridge.model import ReplyTarget
from bridge.ports import DeliveryError


def where(target: ReplyTarget) -> tuple[str, str | None]:
    """The channel a reply goes to, and the thread in it (None: outside any thread)."""
    channel = target.context.get("channel")
    if not isinstance(channel, str) or not channel:
        raise DeliveryError(f"no Slack channel for {target.thread_key}", permanent=True)
    thread_ts = target.context.get("thread_ts")
    return channel, thread_ts if isinstance(thread_ts, str) and thread_ts else None


def split_ref(ref: str) -> tuple[str, str]:
    channel, _, ts = ref.partition(":")
    if not channel or not ts:
        raise DeliveryError(f"not a Slack message reference: {ref!r}", permanent=True)
    return channel, ts


def team_of(target: ReplyTarget) -> str:
    """The workspace a reply goes to (Slack's rate limits are per workspace): the team the
    message came from, else the one in the thread key (``slack:<team>:<channel>...``)."""
    team = target.context.get("team")
    if isinstance(team, str) and team:
        return team
    platform, _, rest = target.thread_key.partition(":")
    return rest.partition(":")[0] if platform == "slack" else ""
