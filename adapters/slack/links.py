"""Slack links an operator pastes (a message's permalink, the web client's address): which
conversation they name.

The core asks through :class:`~bridge.ports.LinkReader` (``jazz-bridge homes show <link>``,
the /ops search); Slack's URL shapes are Slack's business, so they live here.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs

from bridge.ports import LinkPatterns, LinkReader

SLACK_PERMALINK = re.compile(r"^/archives/([A-Z0-9]+)/p(\d{10})(\d{6})")
# Slack's web client: /client/<team>/<channel>, or a thread: .../thread/<channel>-<ts>
SLACK_CLIENT = re.compile(r"^/client/[A-Z0-9]+/([A-Z0-9]+)(?:/thread/[A-Z0-9]+-(\d{10}\.\d{6}))?")


def slack_patterns(path: str, query: str) -> LinkPatterns | None:
    """The thread keys a Slack permalink or client link may name (see ``LinkPatterns``)."""
    permalink = SLACK_PERMALINK.match(path)
    if permalink:
        channel, ts = permalink.group(1), f"{permalink.group(2)}.{permalink.group(3)}"
        thread: str | None = parse_qs(query).get("thread_ts", [ts])[0]
    else:
        client = SLACK_CLIENT.match(path)
        if not client:
            return None
        channel, thread = client.group(1), client.group(2)
    patterns = [f"slack:*:{channel}:{thread}"] if thread else []
    if channel.startswith("D"):  # a DM's own conversation has no thread in its key
        patterns.append(f"slack:*:{channel}")
    if not thread:  # a channel, no thread: its one conversation, if it has only one
        patterns.append(f"slack:*:{channel}:*")
    return LinkPatterns("slack", tuple(patterns))


LINKS = LinkReader(hosts=("slack.com", ".slack.com"), patterns=slack_patterns)
