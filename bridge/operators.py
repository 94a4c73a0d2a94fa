"""What operators ask about conversations: list them, find one from a link, show it.

Someone says "the bot got my thread wrong": from a thread key, a home path, a Slack
message permalink or a Telegram ``t.me`` link the operator gets to the conversation's
home, its runs and its transcript without reading the database by hand.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from provisioning.layout import Layout

from .progress import cost_text
from .store import ConversationRecord, Store

RUN_SCAN_LIMIT = 100_000


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds") if ts else None


def disk_usage(path: Path) -> int:
    """Bytes used under ``path``, following no link."""
    total = 0
    stack = [str(path)]
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as it:
                for entry in it:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


def parse_since(value: str) -> float:
    """``7d``, ``12h``, ``30m`` ago, or an ISO date/time (UTC when no zone is given)."""
    match = re.fullmatch(r"(\d+)([dhm])", value.strip())
    if match:
        n, unit = int(match.group(1)), match.group(2)
        delta = {"d": timedelta(days=n), "h": timedelta(hours=n), "m": timedelta(minutes=n)}[unit]
        return time.time() - delta.total_seconds()
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"--active-since {value!r}: use a duration like 7d, 12h, 30m or a date like 2026-12-01"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def key_from_link(link: str) -> tuple[str, str] | None:
    """(platform, pattern) for a Slack permalink or a Telegram t.me message link.

    The pattern is a thread key with ``*`` for the parts a link does not carry.
    """
    url = urlparse(link)
    host = url.netloc.lower()
    if host.endswith("slack.com"):
        m = re.match(r"^/archives/([A-Z0-9]+)/p(\d{10})(\d{6})", url.path)
        if not m:
            return None
        channel, ts = m.group(1), f"{m.group(2)}.{m.group(3)}"
        thread = parse_qs(url.query).get("thread_ts", [ts])[0]
        return "slack", f"slack:*:{channel}:{thread}"
    if host in ("t.me", "telegram.me"):
        parts = [p for p in url.path.split("/") if p]
        if len(parts) >= 3 and parts[0] == "c":
            chat = f"-100{parts[1]}"
            if len(parts) >= 4:  # /c/<chat>/<topic>/<message>
                return "telegram", f"telegram:{chat}:{parts[2]}"
            return "telegram", f"telegram:{chat}*"
        if len(parts) >= 2:  # public @username link: the chat id is not in it
            return "telegram", f"telegram:@{parts[0]}*"
    return None


def _matches(pattern: str, key: str) -> bool:
    regex = "^" + ".*".join(re.escape(p) for p in pattern.split("*")) + "$"
    return re.match(regex, key) is not None


def account_names(layout: Layout) -> dict[str, str]:
    """home name -> account name, read from the uid map without changing anything."""
    try:
        data = json.loads(layout.uid_map.read_text(encoding="utf-8"))
        accounts = data.get("accounts", {})
        return {str(h): str(e.get("name")) for h, e in accounts.items() if isinstance(e, dict)}
    except (OSError, ValueError, AttributeError):
        return {}


@dataclass
class Operators:
    store: Store
    layout: Layout
    isolated: bool

    async def find(self, ref: str) -> ConversationRecord | None:
        conversations = await self.store.conversations()
        by_key = {c.thread_key: c for c in conversations}
        if ref in by_key:
            return by_key[ref]
        link = key_from_link(ref) if "://" in ref else None
        if link is not None:
            _, pattern = link
            hits = [c for c in conversations if _matches(pattern, c.thread_key)]
            if not hits and pattern.endswith("*"):
                hits = [
                    c for c in conversations if _matches(pattern.rstrip("*") + ":*", c.thread_key)
                ]
            return hits[0] if len(hits) == 1 else None
        name = Path(ref.rstrip("/")).name
        return next((c for c in conversations if c.home == name), None)

    def _account(self, home: str) -> str:
        if not self.isolated:
            return "(gateway's own)"
        return account_names(self.layout).get(home, "(none)")

    async def summary(self, conv: ConversationRecord, *, size: bool = True) -> dict[str, Any]:
        runs = await self.store.runs(conv.id, limit=RUN_SCAN_LIMIT)
        done = [r.outcome for r in runs if r.outcome is not None]
        known = sum(o.cost_usd for o in done if o.cost_known)
        unpriced = sum(1 for o in done if not o.cost_known)
        path = self.layout.home(conv.home)
        return {
            "threadKey": conv.thread_key,
            "platform": conv.platform,
            "home": str(path),
            "account": self._account(conv.home),
            "created": _iso(conv.created_at),
            "lastActive": _iso(conv.last_active_at),
            "epoch": conv.epoch,
            "runs": len(runs),
            "failures": sum(1 for o in done if not o.ok),
            "costUSD": round(known, 6),
            "unpricedRuns": unpriced,
            "sizeBytes": disk_usage(path) if size and path.exists() else 0,
            "archived": not path.exists()
            and (self.layout.archive / f"{conv.home}.tar.gz").exists(),
        }

    async def listing(
        self, *, platform: str | None = None, active_since: float | None = None
    ) -> list[dict[str, Any]]:
        rows = []
        for conv in await self.store.conversations():
            if platform and conv.platform != platform:
                continue
            if active_since and conv.last_active_at < active_since:
                continue
            rows.append(await self.summary(conv))
        return rows

    async def show(self, conv: ConversationRecord, recent: int = 10) -> dict[str, Any]:
        data = await self.summary(conv)
        runs = await self.store.runs(conv.id, limit=recent)
        data["recentRuns"] = [
            {
                "id": r.id,
                "requester": r.requester,
                "started": _iso(r.started_at),
                "outcome": (
                    "in flight"
                    if r.outcome is None
                    else ("ok" if r.outcome.ok else r.outcome.envelope_code or "failed")
                ),
                "durationMs": r.outcome.duration_ms if r.outcome else None,
                "tokens": r.outcome.total_tokens if r.outcome else None,
                "cost": cost_text(r.outcome.cost_usd, r.outcome.cost_known) if r.outcome else None,
                "error": r.outcome.error if r.outcome else None,
            }
            for r in runs
        ]
        data["pendingPrompts"] = [
            {"kind": p.kind, "requester": p.requester, "created": _iso(p.created_at)}
            for p in await self.store.pending_prompts(conv.id)
        ]
        home = Path(data["home"])
        data["transcript"] = str(home / "history")
        data["workspace"] = str(home / "workspace")
        data["jazzConversation"] = f"{conv.thread_key}#{conv.epoch}"
        return data
