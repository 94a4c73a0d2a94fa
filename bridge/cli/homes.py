"""``jazz-bridge homes``: ensure, path, list, show, archive and restore conversation homes.

Listings open the root's store read-only (they never write) and take ``--json``; a root no
gateway has served yet (no database) lists nothing rather than failing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import logs
from ..config import CoreSettings
from ..errors import BridgeError
from ..ports import AdapterSpec
from .console import dump, out
from .init import refuse_foreign_directory

if TYPE_CHECKING:
    from provisioning.layout import Layout

    from ..operators import Operators


@contextlib.asynccontextmanager
async def _operators(settings: CoreSettings) -> AsyncIterator[tuple[Operators, Layout]]:
    """The root's store opened read-only (a listing never writes) and its operators' view."""
    from provisioning.layout import Layout
    from provisioning.sandbox import resolve_isolation

    from ..operators import Operators
    from ..store import SqliteStore

    layout = Layout(settings.root.absolute())
    if not layout.database.exists():
        raise BridgeError(f"no gateway state at {layout.database}: is root {layout.root} right?")
    store = SqliteStore(layout.database, read_only=True)
    await store.open()
    try:
        # isolated as the gateway runs it (an operator's own uid cannot switch users, but
        # the root's accounts are in its uid map)
        isolated = resolve_isolation(settings.isolation) or layout.uid_map.exists()
        yield Operators(store, layout, isolated), layout
    finally:
        await store.close()


def _no_conversation(key: str) -> str:
    return (
        f"no conversation matches {key!r} (a thread key, a home path, a Slack permalink or a "
        "t.me link); see jazz-bridge homes list"
    )


def _unserved(settings: CoreSettings) -> bool:
    """A root with no conversation yet: made by ``init`` or ``homes ensure`` (its ``state/``
    is there), its database not (the gateway makes that when it first serves)."""
    from provisioning.layout import Layout

    layout = Layout(settings.root.absolute())
    return layout.state.is_dir() and not layout.database.exists()


def _check_platform(platform: str | None, known: set[str]) -> None:
    if platform is not None and platform not in known:
        raise BridgeError(
            f"homes list --platform {platform!r}: no such platform "
            f"(one of: {', '.join(sorted(known))})"
        )


def _print_listing(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    if args.json:
        dump(rows)
    else:
        _table(rows)


def _operator_view(
    args: argparse.Namespace, settings: CoreSettings, specs: dict[str, AdapterSpec]
) -> int:
    from ..operators import parse_since

    def unserved() -> int:  # no database to open: nothing listed, no conversation found
        if args.homes_cmd != "list":
            raise BridgeError(_no_conversation(args.key))
        _check_platform(args.platform, {spec.name for spec in specs.values()})
        if args.active_since:
            parse_since(args.active_since)  # a bad value is named, as with conversations
        _print_listing(args, [])
        return 0

    async def go() -> int:
        async with _operators(settings) as (ops, _layout):
            if args.homes_cmd == "list":
                if args.platform is not None:
                    known = {spec.name for spec in specs.values()}
                    known |= {c.platform for c in await ops.store.conversations()}
                    _check_platform(args.platform, known)
                since = parse_since(args.active_since) if args.active_since else None
                rows = await ops.listing(platform=args.platform, active_since=since)
                _print_listing(args, rows)
                return 0
            conv = await ops.find(args.key)
            if conv is None:
                raise BridgeError(_no_conversation(args.key))
            data = await ops.show(conv)
            if "restore" in data:  # the command as this one was run: the same root, config
                data["restore"] += _same_place(args)
            if args.json:
                dump(data)
            else:
                _print_show(data)
            return 0

    try:
        return unserved() if _unserved(settings) else asyncio.run(go())
    except ValueError as exc:
        raise BridgeError(str(exc)) from exc


def _home_path(args: argparse.Namespace, settings: CoreSettings) -> int:
    """``homes path KEY``: the home's path on stdout when it exists; else exit 1 saying why
    on stderr, with nothing on stdout, so ``cd "$(jazz-bridge homes path KEY)"`` fails."""
    from provisioning import naming
    from provisioning.layout import Layout

    key: str = args.key
    layout = Layout(settings.root.absolute())
    link = "://" in key
    would_be = None if link else layout.home(naming.home_name(key))
    if would_be is not None and would_be.is_dir():  # made by homes ensure, or the gateway
        out(str(would_be))
        return 0

    async def find() -> tuple[str, Path] | None:
        async with _operators(settings) as (ops, found_in):
            conv = await ops.find(key)  # a thread key, a home path, a permalink, a t.me link
            return None if conv is None else (conv.thread_key, found_in.home(conv.home))

    problem: str
    try:
        found = asyncio.run(find()) if layout.database.exists() else None
    except (BridgeError, ValueError) as exc:
        found, problem = None, f"{exc}"
    else:
        problem = ""
    if found is not None:
        thread_key, path = found
        if path.is_dir():
            out(str(path))
            return 0
        problem = (
            f"conversation {thread_key} has no home at {path} (archived? jazz-bridge homes "
            f"restore {thread_key})"
        )
    elif would_be is not None:
        problem = f"no conversation {key!r} at root {layout.root} (its home would be {would_be})"
    elif not problem:
        problem = _no_conversation(key)
    sys.stderr.write(f"jazz-bridge: error: {logs.mask(problem)}\n")
    return 1


def _same_place(args: argparse.Namespace) -> str:
    """The ``--config`` and ``--root`` this command was given, for a command it prints."""
    import shlex

    given = [("--config", getattr(args, "config", None)), ("--root", getattr(args, "root", None))]
    return "".join(f" {flag} {shlex.quote(str(value))}" for flag, value in given if value)


def _print_show(data: dict[str, Any]) -> None:
    """``homes show`` as text: what ``--json`` says, labelled for people. An archived
    home's paths do not exist: its archive file is named instead, and how to restore it."""
    from ..operators import cell_text, human_size, label, run_outcome_text

    shown: list[tuple[str, str]] = []
    for k, v in data.items():
        if k in ("recentRuns", "pendingPrompts") or v is None:
            continue
        if data["archived"] and k in ("home", "sizeBytes"):
            continue  # not there until restored; the archive line gives the size
        if k == "archive":
            v = f"{v} ({human_size(data['sizeBytes'])})"
        shown.append((label(k), cell_text(k, v)))
    shown.append(("Recent runs", "" if data["recentRuns"] else "none"))
    width = max(len(name) for name, _ in shown)
    for name, text in shown:
        out(f"{name:>{width}}: {text}".rstrip())
    for r in data["recentRuns"]:
        parts = [f"#{r['id']}", r["started"] or "", run_outcome_text(r)]
        if r["durationMs"] is not None:
            parts.append(cell_text("durationMs", r["durationMs"]))
        if r["tokens"] is not None:
            parts.append(f"{r['tokens']} tokens")
        if r["cost"] is not None:
            parts.append(r["cost"])
        if r["error"] and not r["stoppedBy"]:  # a stop's "interrupted by SIGTERM" is no news
            parts.append(r["error"])
        out("  " + " ".join(p for p in parts if p))
    out(f"{'Pending prompts':>{width}}: {len(data['pendingPrompts'])}")


def _table(rows: list[dict[str, Any]]) -> None:
    from ..operators import LIST_COLUMNS as cols
    from ..operators import cell_text, label

    table = [[label(c) for c in cols]] + [[cell_text(c, r[c]) for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    for row in table:
        out("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _archive_view(args: argparse.Namespace, settings: CoreSettings) -> int:
    """``homes archive`` and ``homes restore``: idle homes into archive/ and back."""
    import time

    from provisioning.archive import is_archived
    from provisioning.layout import Layout

    from ..app import provision
    from ..operators import Operators
    from ..store import ConversationRecord, SqliteStore

    if _unserved(settings):  # no conversation yet: none to restore, none idle
        if args.key is not None:
            raise BridgeError(_no_conversation(args.key))
        _print_archived(args, [], _sweep_days(args, settings))
        return 0
    database = Layout(settings.root.absolute()).database
    if not database.exists():  # before provision(), which would make a whole root there
        raise BridgeError(f"no gateway state at {database}: is root {settings.root} right?")
    prov = provision(settings, repair_homes=False)
    layout = prov.root.layout

    async def find(ops: Operators, key: str) -> ConversationRecord:
        conv = await ops.find(key)
        if conv is None:
            raise BridgeError(_no_conversation(key))
        return conv

    async def go() -> int:
        store = SqliteStore(layout.database)
        await store.open()
        try:
            ops = Operators(store, layout, prov.isolated, accounts=prov.registry)
            if args.homes_cmd == "restore":
                conv = await find(ops, args.key)
                if not await asyncio.to_thread(is_archived, layout, conv.home):
                    raise BridgeError(f"{conv.thread_key} is not archived (see homes list)")
                home = await asyncio.to_thread(prov.homes.ensure, conv.thread_key)
                if args.json:
                    dump(home.as_dict())
                else:
                    out(str(home.path))
                return 0
            idle_days = args.idle_days
            if args.key is not None:
                conv = await find(ops, args.key)
                if idle_days is not None and conv.last_active_at > time.time() - idle_days * 86400:
                    raise BridgeError(
                        f"{conv.thread_key} was active within the last {idle_days:g} days; "
                        "leave out --idle-days to archive it anyway"
                    )
                rows = [{"threadKey": conv.thread_key, "archived": True}]
                # idle is asked again under the home's lock: a message since the check above
                # (the gateway runs meanwhile) keeps the home
                since = time.time() - idle_days * 86400 if idle_days is not None else None
                rows[0].update((await ops.archive(conv, prov.root, idle_since=since)).as_dict())
            else:
                idle_days = _sweep_days(args, settings)
                rows = await ops.archive_idle(prov.root, idle_days)
            _print_archived(args, rows, idle_days)
            return 0 if all(r["archived"] for r in rows) else 1
        finally:
            await store.close()

    return asyncio.run(go())


def _sweep_days(args: argparse.Namespace, settings: CoreSettings) -> float:
    """``homes archive`` without a key: how idle a home must be (--idle-days, else
    retention.archive_idle_days; one of them is needed)."""
    idle_days: float | None = args.idle_days
    if idle_days is None:
        idle_days = settings.retention.archive_idle_days
    if idle_days is None:
        raise BridgeError(
            "say which homes: a thread key, or --idle-days N (or set retention.archive_idle_days)"
        )
    return idle_days


def _print_archived(
    args: argparse.Namespace, rows: list[dict[str, Any]], idle_days: float | None
) -> None:
    if args.json:
        dump(rows)
        return
    for row in rows:
        if row["archived"]:
            out(f"archived {row['threadKey']} -> {row['tarball']} ({row['sizeBytes']} bytes)")
        else:
            out(f"not archived {row['threadKey']}: {row['reason']}")
    if not rows and idle_days is not None:
        out(f"no home idle for {idle_days:g} days")


def cmd_homes(
    args: argparse.Namespace, settings: CoreSettings, specs: dict[str, AdapterSpec]
) -> int:
    from ..app import provision

    if args.homes_cmd in ("list", "show"):
        return _operator_view(args, settings, specs)
    if args.homes_cmd in ("archive", "restore"):
        return _archive_view(args, settings)
    if args.homes_cmd == "path":
        return _home_path(args, settings)
    refuse_foreign_directory(settings)  # ensure makes a root when there is none
    prov = provision(settings, repair_homes=False)
    home = prov.homes.ensure(args.key)
    if args.json:
        dump(home.as_dict())
    else:
        out(str(home.path))
    return 0


def idle_days_type(text: str) -> float:
    """``--idle-days N``: a number of days above zero (fractions allowed: 0.5 is 12 hours),
    as ``retention.archive_idle_days``; zero or less would take every home for idle."""
    try:
        days = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of days") from None
    if not (math.isfinite(days) and days > 0):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a number of days above 0 (e.g. --idle-days 30); every home has "
            "been idle 0 days"
        )
    return days
