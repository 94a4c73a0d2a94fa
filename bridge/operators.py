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

from provisioning.accounts import AccountRegistry
from provisioning.archive import SUFFIX as ARCHIVE_SUFFIX
from provisioning.archive import (
    ArchiveError,
    ArchiveResult,
    is_archived,
    tarball_path,
)
from provisioning.errors import ProvisioningError
from provisioning.layout import CHATS_DIR, Layout, RootInfo
from provisioning.reclaim import archive_and_reclaim

from .errors import BridgeError
from .model import InboxState
from .progress import cost_text
from .store import ConversationRecord, Store

RUN_SCAN_LIMIT = 100_000
LISTING_CONCURRENCY = 4  # homes summed at once for a listing (each a walk in a thread)
DAY_S = 86400.0
AMBIGUOUS_SHOWN = 10  # conversations an ambiguous link names
BLOCK_BYTES = 512  # the unit of st_blocks
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
    """Bytes used under ``path`` (itself included), following no link, as ``du`` counts:
    a file with several names (hard links: a local ``git clone``, ``cp -al``) once."""
    try:
        total = os.lstat(path).st_blocks * BLOCK_BYTES
    except OSError:
        return 0
    seen: set[tuple[int, int]] = set()
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
                    if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                        if (st.st_dev, st.st_ino) in seen:
                            continue
                        seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * BLOCK_BYTES
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


SLACK_PERMALINK = re.compile(r"^/archives/([A-Z0-9]+)/p(\d{10})(\d{6})")
# Slack's web client: /client/<team>/<channel>, or a thread: .../thread/<channel>-<ts>
SLACK_CLIENT = re.compile(r"^/client/[A-Z0-9]+/([A-Z0-9]+)(?:/thread/[A-Z0-9]+-(\d{10}\.\d{6}))?")
TELEGRAM_HOSTS = ("t.me", "telegram.me")
# a link pasted without its scheme (https:// is added to read it)
SCHEMELESS_LINK = re.compile(r"^(?:www\.)?(?:t\.me|telegram\.me|[a-z0-9.-]*slack\.com)/", re.I)


@dataclass(frozen=True)
class LinkPatterns:
    """The thread key patterns a link gives, tried in order (see :func:`key_from_link`).

    ``first``: tried before ``patterns``: a Telegram link to message N of a chat may be the
    link of forum topic N (a topic's id is the id of the message that opened it).
    """

    platform: str
    patterns: tuple[str, ...]
    first: tuple[str, ...] = ()


def key_from_link(link: str) -> tuple[str, tuple[str, ...]] | None:
    """(platform, patterns) for a Slack permalink or a Telegram t.me message link.

    Each pattern is a thread key with ``*`` for the parts a link does not carry; they are
    tried in order (the most precise first), and a pattern counts only when it matches one
    conversation. :meth:`Operators.find` also tries :attr:`LinkPatterns.first` before them.
    """
    parsed = link_patterns(link)
    return None if parsed is None else (parsed.platform, parsed.patterns)


def link_patterns(link: str) -> LinkPatterns | None:
    """What :func:`key_from_link` says, with the patterns tried before those."""
    url = urlparse(link.strip())
    host = (url.hostname or "").lower()
    if host == "slack.com" or host.endswith(".slack.com"):
        return _slack_patterns(url.path, url.query)
    if host in TELEGRAM_HOSTS or host in {f"www.{h}" for h in TELEGRAM_HOSTS}:
        return _telegram_patterns(url.path, url.query)
    return None


def _slack_patterns(path: str, query: str) -> LinkPatterns | None:
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


def _telegram_patterns(path: str, query: str) -> LinkPatterns | None:
    parts = [p for p in path.split("/") if p]
    topic = parse_qs(query).get("thread", [""])[0]
    if len(parts) >= 3 and parts[0] == "c" and parts[1].isdigit():
        chat = f"-100{parts[1]}"
        if len(parts) >= 4:  # /c/<chat>/<topic>/<message>
            return LinkPatterns("telegram", (f"telegram:{chat}:{parts[2]}",))
        if topic.isdigit():  # /c/<chat>/<message>?thread=<topic>
            return LinkPatterns("telegram", (f"telegram:{chat}:{topic}", f"telegram:{chat}"))
        # /c/<chat>/<message>: the topic it opened, else the chat's own conversation, else
        # its one topic
        return LinkPatterns(
            "telegram",
            (f"telegram:{chat}", f"telegram:{chat}:*"),
            first=(f"telegram:{chat}:{parts[2]}",),
        )
    if len(parts) >= 2:  # a public chat's link: its @username, not its id (_username_key)
        chat = f"@{parts[0].lower()}"
        if len(parts) >= 3:  # /<name>/<topic>/<message>
            return LinkPatterns("telegram", (f"telegram:{chat}:{parts[1]}",))
        if topic.isdigit():
            return LinkPatterns("telegram", (f"telegram:{chat}:{topic}", f"telegram:{chat}"))
        return LinkPatterns(
            "telegram",
            (f"telegram:{chat}", f"telegram:{chat}:*"),
            first=(f"telegram:{chat}:{parts[1]}",),
        )
    return None


def _matches(pattern: str, key: str) -> bool:
    regex = "^" + ".*".join(re.escape(p) for p in pattern.split("*")) + "$"
    return re.match(regex, key) is not None


def _moved_key(conv: ConversationRecord) -> str | None:
    """A Telegram group upgraded to a supergroup keeps the conversation keyed on its first
    chat id, while its messages (and so its links) carry the new one: the key it would
    have under the chat id of its latest message, when that differs."""
    if conv.platform != "telegram":
        return None
    chat = conv.target.get("chat_id")
    if not isinstance(chat, int):
        return None
    _platform, _, rest = conv.thread_key.partition(":")
    first, sep, topic = rest.partition(":")
    if first == str(chat):
        return None
    return f"telegram:{chat}{sep}{topic}"


def _username_key(conv: ConversationRecord) -> str | None:
    """A public Telegram chat's links name it by its @username, not its id: the key the
    conversation has under the username its latest message came with."""
    if conv.platform != "telegram":
        return None
    name = conv.target.get("chat_username")
    if not isinstance(name, str) or not name:
        return None
    _platform, _, rest = conv.thread_key.partition(":")
    _first, sep, topic = rest.partition(":")
    return f"telegram:@{name}{sep}{topic}"


def _by_pattern(pattern: str, conversations: list[ConversationRecord]) -> list[ConversationRecord]:
    """The conversations ``pattern`` matches: by their own key, else by a moved chat's, else
    by a public chat's @username."""
    own = [c for c in conversations if _matches(pattern, c.thread_key)]
    if own:
        return own
    for alias in (_moved_key, _username_key):
        found = [c for c in conversations if (k := alias(c)) is not None and _matches(pattern, k)]
        if found:
            return found
    return []


def _home_names(ref: str) -> list[str]:
    """The home names a path may name: its last part, a tarball's name, or the directory
    under ``chats/`` it lies in (a file inside a home, pasted from a log line)."""
    path = Path(ref.rstrip("/"))
    names = [path.name, path.name.removesuffix(ARCHIVE_SUFFIX)]
    parts = path.parts
    if CHATS_DIR in parts[:-1]:
        at = len(parts) - 1 - parts[::-1].index(CHATS_DIR)
        if at + 1 < len(parts):
            names.append(parts[at + 1])
    return names


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
    # Isolated: the root's accounts; an archived home's account is given back (reclaim.py)
    accounts: AccountRegistry | None = None
    _sizes: dict[str, tuple[float, int]] = field(default_factory=dict, init=False, repr=False)

    async def find(self, ref: str) -> ConversationRecord | None:
        """The conversation ``ref`` names: a thread key, a link (see :func:`key_from_link`),
        or a home's path (or a path inside one, or its tarball's); None when none.
        AmbiguousLink when a link fits several (a chat's link, the bot in several of its
        topics or threads)."""
        conversations = await self.store.conversations()
        by_key = {c.thread_key: c for c in conversations}
        if ref in by_key:
            return by_key[ref]
        if "://" not in ref and SCHEMELESS_LINK.match(ref.strip()):
            ref = "https://" + ref.strip()
        link = link_patterns(ref) if "://" in ref else None
        if link is not None:
            for pattern in link.first + link.patterns:
                hits = _by_pattern(pattern, conversations)
                if len(hits) > 1:
                    raise AmbiguousLink(ref, [c.thread_key for c in hits])
                if hits:
                    return hits[0]
            return None
        by_home = {c.home: c for c in conversations}
        return next((by_home[n] for n in _home_names(ref) if n in by_home), None)

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

    async def archive(
        self, conv: ConversationRecord, root: RootInfo, *, idle_since: float | None = None
    ) -> ArchiveResult:
        """Pack ``conv``'s home away; ArchiveBusy when it is not idle (checked under the lock).

        ``idle_since``: the sweep's cut-off; a conversation written to after it (while the
        sweep packed the homes before it) is refused too, as not idle any more.
        """
        loop = asyncio.get_running_loop()

        async def why_not() -> str | None:
            reason = await self.busy_reason(conv)
            if reason is None and idle_since is not None:
                now = await self.store.conversation(conv.id)
                if now is not None and now.last_active_at >= idle_since:
                    reason = f"was active again at {_iso(now.last_active_at)}"
            return reason

        def check() -> None:  # runs on the archiving thread, under the archive lock
            reason = asyncio.run_coroutine_threadsafe(why_not(), loop).result()
            if reason is not None:
                raise ArchiveBusy(f"{conv.thread_key} {reason}; it can be archived once it is idle")

        # the account's reclaim kills its processes and runs userdel: on the same thread
        return await asyncio.to_thread(archive_and_reclaim, root, conv.home, self.accounts, check)

    async def idle(self, cutoff: float) -> list[ConversationRecord]:
        """Conversations not active since ``cutoff`` whose home is on disk, oldest first."""
        stale = [c for c in await self.store.conversations() if c.last_active_at < cutoff]
        present = [
            c for c in stale if await asyncio.to_thread(os.path.isdir, self.layout.home(c.home))
        ]
        return sorted(present, key=lambda c: c.last_active_at)

    async def archive_idle(self, root: RootInfo, idle_days: float) -> list[dict[str, Any]]:
        """Archive every idle home that is not busy; one row per home tried."""
        rows: list[dict[str, Any]] = []
        cutoff = time.time() - idle_days * DAY_S
        for conv in await self.idle(cutoff):
            row: dict[str, Any] = {"threadKey": conv.thread_key, "home": conv.home}
            try:
                archived = await self.archive(conv, root, idle_since=cutoff)
                row.update(archived.as_dict(), archived=True)
            except (ArchiveBusy, ArchiveError) as exc:  # this home stays; the others go on
                row.update(archived=False, reason=str(exc))
            except (ProvisioningError, OSError) as exc:  # the archive disk full, say
                row.update(archived=False, failed=True, reason=f"archiving failed: {exc}")
            rows.append(row)
        return rows


class AmbiguousLink(BridgeError):
    """A link fits more than one conversation; the message names them."""

    def __init__(self, link: str, keys: list[str]) -> None:
        shown = ", ".join(keys[:AMBIGUOUS_SHOWN])
        more = f" and {len(keys) - AMBIGUOUS_SHOWN} more" if len(keys) > AMBIGUOUS_SHOWN else ""
        super().__init__(
            f"{link!r} fits {len(keys)} conversations ({shown}{more}); name one by its "
            "thread key (see jazz-bridge homes list)"
        )
        self.keys = keys


class ArchiveBusy(BridgeError):
    """The conversation has a run in flight, a queued message or a pending prompt."""
