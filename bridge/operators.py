"""What operators ask about conversations: list them, find one from a link, show it.

Someone says "the bot got my thread wrong": from a thread key, a home path, a Slack
message permalink or a Telegram ``t.me`` link the operator gets to the conversation's
home, its runs and its transcript without reading the database by hand.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from provisioning.archive import (
    ArchiveError,
    ArchiveResult,
    archive_home,
    is_archived,
    tarball_path,
)
from provisioning.layout import Layout, RootInfo

from .errors import BridgeError
from .model import InboxState
from .progress import cost_text
from .store import ConversationRecord, Store

RUN_SCAN_LIMIT = 100_000
LISTING_CONCURRENCY = 4  # homes summed at once for a listing (each a walk in a thread)
OPS_SIZE_TTL_S = 300.0  # the /ops page reuses a home's measured size this long
LIST_COLUMNS = (
    "threadKey",
    "platform",
    "account",
    "created",
    "lastActive",
    "runs",
    "failures",
    "costUSD",
    "unpricedRuns",
    "sizeBytes",
    "archived",
    "home",
)
"""The columns of ``homes list`` and of the /ops page, in order."""


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
        n, unit = int(match.group(1)), {"d": "days", "h": "hours", "m": "minutes"}[match.group(2)]
        try:
            delta = timedelta(**{unit: n})
        except OverflowError:
            raise ValueError(f"--active-since {value!r}: too far back to count") from None
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


def key_from_link(link: str) -> tuple[str, tuple[str, ...]] | None:
    """(platform, patterns) for a Slack permalink or a Telegram t.me message link.

    Each pattern is a thread key with ``*`` for the parts a link does not carry; they are
    tried in order (the most precise first), and a pattern counts only when it matches one
    conversation.
    """
    url = urlparse(link)
    host = url.netloc.lower()
    if host.endswith("slack.com"):
        m = re.match(r"^/archives/([A-Z0-9]+)/p(\d{10})(\d{6})", url.path)
        if not m:
            return None
        channel, ts = m.group(1), f"{m.group(2)}.{m.group(3)}"
        thread = parse_qs(url.query).get("thread_ts", [ts])[0]
        patterns = [f"slack:*:{channel}:{thread}"]
        if channel.startswith("D"):  # a DM's own conversation has no thread in its key
            patterns.append(f"slack:*:{channel}")
        return "slack", tuple(patterns)
    if host in ("t.me", "telegram.me"):
        parts = [p for p in url.path.split("/") if p]
        if len(parts) >= 3 and parts[0] == "c":
            chat = f"-100{parts[1]}"
            if len(parts) >= 4:  # /c/<chat>/<topic>/<message>
                return "telegram", (f"telegram:{chat}:{parts[2]}",)
            # /c/<chat>/<message>: the chat's own conversation, else its one topic
            return "telegram", (f"telegram:{chat}", f"telegram:{chat}:*")
        if len(parts) >= 2:  # public @username link: the chat id is not in it
            return "telegram", (f"telegram:@{parts[0]}*",)
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
    # How long a home's measured size is reused (the /ops page; 0 measures every time, as
    # the one-shot CLI does): measuring walks the whole home, and the page lists them all.
    size_ttl_s: float = 0.0
    _sizes: dict[str, tuple[float, int]] = field(default_factory=dict, init=False, repr=False)

    async def find(self, ref: str) -> ConversationRecord | None:
        conversations = await self.store.conversations()
        by_key = {c.thread_key: c for c in conversations}
        if ref in by_key:
            return by_key[ref]
        link = key_from_link(ref) if "://" in ref else None
        if link is not None:
            for pattern in link[1]:
                hits = [c for c in conversations if _matches(pattern, c.thread_key)]
                if hits:
                    return hits[0] if len(hits) == 1 else None  # ambiguous: say none
            return None
        name = Path(ref.rstrip("/")).name
        return next((c for c in conversations if c.home == name), None)

    def _account(self, home: str, names: dict[str, str] | None = None) -> str:
        if not self.isolated:
            return "(gateway's own)"
        return (names if names is not None else account_names(self.layout)).get(home, "(none)")

    async def _size(self, path: Path) -> int:
        key = str(path)
        now = time.monotonic()
        cached = self._sizes.get(key)
        if cached is not None and now - cached[0] < self.size_ttl_s:
            return cached[1]
        used = await asyncio.to_thread(disk_usage, path)
        if self.size_ttl_s > 0:
            self._sizes[key] = (now, used)
        return used

    async def summary(
        self,
        conv: ConversationRecord,
        *,
        size: bool = True,
        accounts: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """One conversation's row; ``accounts`` (from :func:`account_names`) saves a read."""
        runs = await self.store.runs(conv.id, limit=RUN_SCAN_LIMIT)
        done = [r.outcome for r in runs if r.outcome is not None]
        known = sum(o.cost_usd for o in done if o.cost_known)
        unpriced = sum(1 for o in done if not o.cost_known)
        path = self.layout.home(conv.home)
        archived = await asyncio.to_thread(is_archived, self.layout, conv.home)
        if not size:
            used = 0
        elif archived:
            used = (await asyncio.to_thread(tarball_path(self.layout, conv.home).stat)).st_size
        else:
            used = await self._size(path)
        return {
            "threadKey": conv.thread_key,
            "platform": conv.platform,
            "home": str(path),
            "account": self._account(conv.home, accounts),
            "created": _iso(conv.created_at),
            "lastActive": _iso(conv.last_active_at),
            "epoch": conv.epoch,
            "runs": len(runs),
            "failures": sum(1 for o in done if not o.ok),
            "costUSD": round(known, 6),
            "unpricedRuns": unpriced,
            "sizeBytes": used,
            "archived": archived,
        }

    async def listing(
        self, *, platform: str | None = None, active_since: float | None = None
    ) -> list[dict[str, Any]]:
        wanted = [
            conv
            for conv in await self.store.conversations()
            if not (platform and conv.platform != platform)
            and not (active_since and conv.last_active_at < active_since)
        ]
        accounts = await asyncio.to_thread(account_names, self.layout) if self.isolated else {}
        bound = asyncio.Semaphore(LISTING_CONCURRENCY)

        async def row(conv: ConversationRecord) -> dict[str, Any]:
            async with bound:
                return await self.summary(conv, accounts=accounts)

        return list(await asyncio.gather(*(row(c) for c in wanted)))

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

    # -- idle homes --------------------------------------------------------------------------

    async def busy_reason(self, conv: ConversationRecord) -> str | None:
        """Why ``conv`` must not be archived now (a run, a queued message, a prompt), if so."""
        if await self.store.count_in_state(conv.id, InboxState.RUNNING):
            return "has a run in flight"
        queued = await self.store.count_in_state(conv.id, InboxState.ACCEPTED)
        if queued:
            return f"has {queued} message(s) queued"
        if await self.store.pending_prompts(conv.id):
            return "has a prompt waiting for an answer"
        if any(r.conversation_id == conv.id for r in await self.store.undelivered_replies()):
            return "has replies not yet delivered (files are sent from its home)"
        return None

    async def archive(self, conv: ConversationRecord, root: RootInfo) -> ArchiveResult:
        """Pack ``conv``'s home away; ArchiveBusy when it is not idle (checked under the lock)."""
        loop = asyncio.get_running_loop()

        def check() -> None:  # runs on the archiving thread, under the archive lock
            reason = asyncio.run_coroutine_threadsafe(self.busy_reason(conv), loop).result()
            if reason is not None:
                raise ArchiveBusy(f"{conv.thread_key} {reason}; it can be archived once it is idle")

        return await asyncio.to_thread(archive_home, root, conv.home, check)

    async def idle(self, idle_days: float) -> list[ConversationRecord]:
        """Conversations not active for ``idle_days`` whose home is on disk, oldest first."""
        cutoff = time.time() - idle_days * 86400
        stale = [c for c in await self.store.conversations() if c.last_active_at < cutoff]
        present = [
            c for c in stale if await asyncio.to_thread(os.path.isdir, self.layout.home(c.home))
        ]
        return sorted(present, key=lambda c: c.last_active_at)

    async def archive_idle(self, root: RootInfo, idle_days: float) -> list[dict[str, Any]]:
        """Archive every idle home that is not busy; one row per home tried."""
        rows: list[dict[str, Any]] = []
        for conv in await self.idle(idle_days):
            row: dict[str, Any] = {"threadKey": conv.thread_key, "home": conv.home}
            try:
                row.update((await self.archive(conv, root)).as_dict(), archived=True)
            except (ArchiveBusy, ArchiveError) as exc:  # this home stays; the others go on
                row.update(archived=False, reason=str(exc))
            rows.append(row)
        return rows


class ArchiveBusy(BridgeError):
    """The conversation has a run in flight, a queued message or a pending prompt."""
