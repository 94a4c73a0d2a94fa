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
import shlex
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from provisioning.accounts import AccountRegistry
from provisioning.archive import SUFFIX as ARCHIVE_SUFFIX
from provisioning.archive import ArchiveResult, is_archived, tarball_path
from provisioning.errors import ArchiveError, ProvisioningError
from provisioning.layout import CHATS_DIR, Layout, RootInfo
from provisioning.reclaim import archive_and_reclaim

from .engine.progress import cost_text
from .errors import BridgeError
from .model import InboxState
from .plugins import load_specs
from .ports import LinkPatterns, LinkReader
from .store import ConversationRecord, RunRecord, Store

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
"""The columns of ``homes list`` and of the /ops page, in order: the keys of ``homes list
--json`` (a stable interface: never renamed); :data:`LABELS` are what people read."""

LABELS = {
    "threadKey": "Thread key",
    "platform": "Platform",
    "account": "Account",
    "created": "Created",
    "lastActive": "Last active",
    "epoch": "Epoch",
    "runs": "Runs",
    "failures": "Failures",
    "costUSD": "Cost (USD)",
    "unpricedRuns": "Unpriced runs",
    "sizeBytes": "Home size",
    "archived": "Archived",
    "home": "Home",
    "archive": "Archive",
    "restore": "Restore with",
    "transcript": "Transcript",
    "workspace": "Workspace",
    "jazzConversation": "Jazz conversation",
    # a run of homes show's recentRuns
    "id": "Run",
    "requester": "Requester",
    "started": "Started",
    "outcome": "Outcome",
    "durationMs": "Duration",
    "tokens": "Tokens",
    "cost": "Cost",
    "error": "Error",
    # a pending prompt
    "kind": "Kind",
    # a line of the /ops transcript
    "at": "Time",
    "role": "Role",
    "sender": "Sender",
    "text": "Text",
}
"""What people read for each key of ``homes list`` and ``homes show`` (the CLI's tables and
the /ops pages); the ``--json`` output keeps the keys."""

SIZE_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def label(key: str) -> str:
    return LABELS.get(key, key)


def human_size(size: int) -> str:
    """``size`` bytes as people read it: ``512 B``, ``1.2 MiB`` (powers of 1024)."""
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in SIZE_UNITS:
        value /= 1024
        if value < 1024 or unit == SIZE_UNITS[-1]:
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def human_duration(ms: int) -> str:
    """A run's duration: ``850 ms``, ``12.3 s``, ``4 min 05 s``."""
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(round(ms / 1000), 60)
    return f"{minutes} min {seconds:02d} s"


def cell_text(key: str, value: Any) -> str:
    """A value of ``homes list``/``show`` as its text table and the /ops pages show it:
    sizes human-readable, booleans yes/no, nothing for None."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key == "sizeBytes" and isinstance(value, int):
        return human_size(value)
    if key == "durationMs" and isinstance(value, int):
        return human_duration(value)
    return str(value)


def run_outcome_text(run: dict[str, Any]) -> str:
    """A run's outcome (a row of ``show``'s recentRuns) as people read it: a person's Stop
    says who stopped it and how ("stopped by Ada (Stop button)"), not the signal it took."""
    if run.get("stoppedBy"):
        return f"stopped by {run['stoppedBy']}"
    return str(run["outcome"])


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


def installed_links() -> tuple[LinkReader, ...]:
    """The link readers of every adapter installed (their specs' ``links``)."""
    return tuple(spec.links for spec in load_specs().values() if spec.links is not None)


def link_patterns(link: str, readers: Iterable[LinkReader]) -> LinkPatterns | None:
    """The patterns a link to a platform's message gives (the reader of its host's
    platform says), or None when it is no such link."""
    url = urlparse(link.strip())
    host = url.hostname or ""
    reader = next((r for r in readers if r.reads(host)), None)
    return None if reader is None else reader.patterns(url.path, url.query)


def key_from_link(
    link: str, readers: Iterable[LinkReader] | None = None
) -> tuple[str, tuple[str, ...]] | None:
    """(platform, patterns) for a link to a message (a Slack permalink, a Telegram t.me
    link: whatever the installed adapters read; ``readers``: those, by default).

    Each pattern is a thread key with ``*`` for the parts a link does not carry; they are
    tried in order (the most precise first), and a pattern counts only when it matches one
    conversation. :meth:`Operators.find` also tries :attr:`LinkPatterns.first` before them.
    """
    parsed = link_patterns(link, installed_links() if readers is None else readers)
    return None if parsed is None else (parsed.platform, parsed.patterns)


def _schemeless(ref: str, readers: Iterable[LinkReader]) -> bool:
    """Whether ``ref`` is a link pasted without its scheme (``t.me/...``)."""
    host, sep, _ = ref.strip().partition("/")
    return bool(sep) and "." in host and any(r.reads(host) for r in readers)


def _matches(pattern: str, key: str) -> bool:
    regex = "^" + ".*".join(re.escape(p) for p in pattern.split("*")) + "$"
    return re.match(regex, key) is not None


def _by_pattern(
    pattern: str, conversations: list[ConversationRecord], reader: LinkReader, platform: str
) -> list[ConversationRecord]:
    """The conversations ``pattern`` matches: by their own key, else by each kind of alias
    the platform gives them in turn (a moved chat's key, a public chat's @username)."""
    own = [c for c in conversations if _matches(pattern, c.thread_key)]
    if own or reader.aliases is None:
        return own
    known = [
        (c, reader.aliases(c.thread_key, c.target)) for c in conversations if c.platform == platform
    ]
    for kind in range(max((len(a) for _, a in known), default=0)):
        found = [
            c
            for c, keys in known
            if kind < len(keys) and (k := keys[kind]) is not None and _matches(pattern, k)
        ]
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
    # How links name conversations: the installed adapters' readers when None
    links: tuple[LinkReader, ...] | None = None
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
        readers = self.links if self.links is not None else installed_links()
        if "://" not in ref and _schemeless(ref, readers):
            ref = "https://" + ref.strip()
        link = link_patterns(ref, readers) if "://" in ref else None
        if link is not None:
            reader = next(r for r in readers if r.reads(urlparse(ref.strip()).hostname or ""))
            for pattern in link.first + link.patterns:
                hits = _by_pattern(pattern, conversations, reader, link.platform)
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
            # a run a person stopped is no failure
            "failures": sum(1 for o in done if not o.ok and o.stopped_by is None),
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
        data["recentRuns"] = [_run_row(r) for r in runs]
        data["pendingPrompts"] = [
            {"kind": p.kind, "requester": p.requester, "created": _iso(p.created_at)}
            for p in await self.store.pending_prompts(conv.id)
        ]
        home = Path(data["home"])
        if data["archived"]:
            # the home is packed away: its paths do not exist until it is restored (to
            # ``home``); the archive file does (``sizeBytes`` is its size)
            data["archive"] = str(tarball_path(self.layout, conv.home))
            data["restore"] = f"jazz-bridge homes restore {shlex.quote(conv.thread_key)}"
            data["transcript"] = None
            data["workspace"] = None
        else:
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


def _run_row(r: RunRecord) -> dict[str, Any]:
    """One run of ``show``'s recentRuns. A run a person stopped has outcome ``stopped`` and
    ``stoppedBy`` ("Ada (Stop button)"); its ``error`` is what the runner said as it was
    stopped ("interrupted by SIGTERM"), which the text views leave out."""
    o = r.outcome
    if o is None:
        outcome = "in flight"
    elif o.ok:
        outcome = "ok"
    elif o.stopped_by is not None:
        outcome = "stopped"
    else:
        outcome = o.envelope_code or "failed"
    return {
        "id": r.id,
        "requester": r.requester,
        "started": _iso(r.started_at),
        "outcome": outcome,
        "stoppedBy": o.stopped_by if o else None,
        "durationMs": o.duration_ms if o else None,
        "tokens": o.total_tokens if o else None,
        "cost": cost_text(o.cost_usd, o.cost_known) if o else None,
        "error": o.error if o else None,
    }


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
