"""The ``jazz-bridge`` command line: serve, init, repair, homes, config check.

Each subcommand loads the configuration the same way ``serve`` does, so what an operator
checks is what the gateway runs with. Errors are one clear line on stderr and exit 2;
listings take ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import grp
import json
import logging
import logging.handlers
import math
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provisioning.errors import ProvisioningError

from .. import logs
from ..config import CoreSettings, effective_config, load_settings
from ..errors import BridgeError
from ..plugins import load_specs
from ..ports import AdapterSpec

if TYPE_CHECKING:
    from provisioning.layout import Layout

    from ..operators import Operators

log = logging.getLogger("jazz_bridge")

EXIT_ERROR = 2
LOST_AND_FOUND = "lost+found"  # on a filesystem made for the root: it may hold that
FOREIGN_SHOWN = 3  # entries named when refusing a directory that is not a root


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _dump(data: Any) -> None:
    _out(json.dumps(data, indent=2, sort_keys=True, default=str))


def setup_logging(
    settings: CoreSettings | None, level: str | None = None, *, writer_thread: bool = False
) -> None:
    """Log handlers as configured. ``writer_thread`` (``serve``): lines are written by a
    thread of their own, so a write that blocks never stops the event loop; one-shot
    commands write in place, so their lines and errors keep their order."""
    chosen = level or (settings.log.level if settings else "INFO")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if settings is not None and settings.log.file is not None:
        try:
            settings.log.file.parent.mkdir(parents=True, exist_ok=True)
            handlers.append(
                logs.CappedFileHandler(  # capped with log.backups = 0 as well
                    settings.log.file,
                    maxBytes=settings.log.max_bytes,
                    backupCount=settings.log.backups,
                    encoding="utf-8",
                )
            )
        except OSError as exc:  # an operator's command must not fail on the gateway's log
            sys.stderr.write(f"jazz-bridge: warning: not logging to {settings.log.file}: {exc}\n")
    # JSON lines unless on a terminal (log.format), every configured secret masked
    logs.install(handlers, fmt=settings.log.format if settings else "auto", settings=settings)
    if writer_thread:
        handlers = [logs.off_thread(handlers)]
    else:
        logs.stop_writer()  # an earlier set-up's thread, if any
    logging.basicConfig(level=chosen, handlers=handlers, force=True)


def _settings(args: argparse.Namespace, specs: dict[str, AdapterSpec]) -> CoreSettings:
    settings = load_settings(
        args.config, adapter_sections={k: s.settings_model for k, s in specs.items()}
    )
    updates: dict[str, Any] = {}
    if getattr(args, "root", None):
        updates["root"] = Path(args.root)
    if getattr(args, "operator_group", None):
        updates["operator_group"] = args.operator_group
    return settings.model_copy(update=updates) if updates else settings


# -- commands ----------------------------------------------------------------------------------


def _bind_problem(exc: OSError, host: str, port: int) -> str | None:
    """One line for an address ``serve`` cannot listen on, naming the settings; None when
    ``exc`` is not about the address."""
    where = "server.host/server.port (JAZZ_BRIDGE_SERVER__HOST, JAZZ_BRIDGE_SERVER__PORT)"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} on {host} is already in use: stop what listens there (ss -ltnp "
            f"'sport = :{port}') or pick another server.port (JAZZ_BRIDGE_SERVER__PORT)"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{host} is not an address of this machine: fix {where}"
    if exc.errno == errno.EACCES:
        return (
            f"not allowed to listen on port {port} (below 1024 needs CAP_NET_BIND_SERVICE): "
            "pick a server.port from 1024 up (JAZZ_BRIDGE_SERVER__PORT)"
        )
    return None


def _unresolvable(host: str, exc: Exception) -> str:
    return (
        f"server.host {host!r} is no address this machine can listen on ({exc}): fix "
        "server.host (JAZZ_BRIDGE_SERVER__HOST), e.g. 127.0.0.1 or 0.0.0.0"
    )


def _check_address(host: str, port: int) -> None:
    """Refuse an address already taken before anything is made (a new root included); the
    server binds it again, as asyncio does (SO_REUSEADDR, IPv6 only on v6 sockets)."""
    try:
        found = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (socket.gaierror, UnicodeError) as exc:
        raise BridgeError(_unresolvable(host, exc)) from None
    if port == 0:
        return  # any free port: nothing to probe
    for family, kind, proto, _name, address in found:
        try:
            probe = socket.socket(family, kind, proto)
        except OSError:
            continue
        with probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                problem = _bind_problem(exc, host, port)
                if problem is not None:
                    raise BridgeError(problem) from None


def _refuse_foreign_directory(settings: CoreSettings) -> None:
    """Before a root is made: refuse an existing directory that is not one and holds other
    things (``--root /tmp``, a mistyped ``/srv``). Making a root of it sets its mode to 2751
    and gives it to the operator group: /tmp's sticky bit and everyone's access to what it
    holds would be gone. A root (its ``state/``), an empty directory (systemd-tmpfiles, a new
    volume) and one holding only a root's own entries, a new filesystem's ``lost+found``
    or the gateway's log file are taken."""
    from provisioning import layout

    root = settings.root.absolute()
    if layout.Layout(root).state.is_dir():
        return
    try:
        entries = sorted(os.listdir(root))
    except (FileNotFoundError, NotADirectoryError):
        return  # made new, or named by init_root's own checks
    allowed = {
        layout.CHATS_DIR,
        layout.PERSONAS_DIR,
        layout.STATE_DIR,
        layout.ARCHIVE_DIR,
        layout.TOOLS_DIR,
        LOST_AND_FOUND,
    }
    log_file = settings.log.file.absolute() if settings.log.file is not None else None
    if log_file is not None and log_file.is_relative_to(root):
        allowed.add(log_file.relative_to(root).parts[0])
    foreign = [entry for entry in entries if entry not in allowed]
    if foreign:
        shown = ", ".join(foreign[:FOREIGN_SHOWN]) + (
            ", ..." if len(foreign) > FOREIGN_SHOWN else ""
        )
        raise BridgeError(
            f"root {root} is an existing directory holding other things ({shown}), not a "
            "gateway root: making it one would set its mode to 2751 and give it to the "
            "operator group; pick a new or empty directory (--root, root, JAZZ_BRIDGE_ROOT)"
        )


def cmd_serve(
    args: argparse.Namespace, settings: CoreSettings, specs: dict[str, AdapterSpec]
) -> int:
    from provisioning.layout import Layout

    from ..app import lock_root, serve

    _refuse_foreign_directory(settings)
    host, port = settings.server.host, settings.server.port
    state = Layout(settings.root.absolute()).state
    if state.is_dir():
        # a second serve is told by the root's lock, which names the gateway holding it,
        # rather than by the port that gateway holds
        os.close(lock_root(state))
    # No root made, and no store touched, for a gateway that cannot listen: the recovery
    # would requeue the messages left accepted, and the failed start's stop tell each one
    # "shutting down, send again" before a single run of it (at every systemd restart).
    _check_address(host, port)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(settings, specs, stop)

    try:
        asyncio.run(main())
    except socket.gaierror as exc:  # an existing root: the server resolved it first
        raise BridgeError(_unresolvable(host, exc)) from None
    except OSError as exc:  # taken meanwhile, or an address the probe could not tell
        # asyncio: "error while attempting to bind on address ...", the errno kept
        problem = _bind_problem(exc, host, port) if "bind" in str(exc) else None
        if problem is None:
            raise
        raise BridgeError(problem) from None
    return 0


def cmd_init(args: argparse.Namespace, settings: CoreSettings, _: dict[str, AdapterSpec]) -> int:
    from provisioning.layout import init_root

    _refuse_foreign_directory(settings)
    info = init_root(settings.root, settings.operator_group)
    data = {
        "root": str(info.layout.root),
        "operatorGroup": info.operator_group,
        "operatorGid": info.operator_gid,
        "chats": str(info.layout.chats),
        "personas": str(info.layout.personas),
        "state": str(info.layout.state),
    }
    if args.json:
        _dump(data)
    else:
        _out(f"root {data['root']} ready (operator group {info.operator_group})")
    return 0


def cmd_repair(args: argparse.Namespace, settings: CoreSettings, _: dict[str, AdapterSpec]) -> int:
    from provisioning.layout import Layout
    from provisioning.repair import repair

    from ..app import provision

    layout = Layout(settings.root.absolute())
    # a root's state/ (init and serve make it), or an empty directory made for one
    # (systemd-tmpfiles, a new container volume): a mistyped root is named, not made
    if not layout.state.is_dir():
        try:
            empty = layout.root.is_dir() and not any(layout.root.iterdir())
        except OSError:
            empty = False
        if not empty:
            what = "does not exist" if not layout.root.exists() else "has no state/ directory"
            raise BridgeError(
                f"no gateway state at {layout.root} (it {what}): is root right (--root, root, "
                f"JAZZ_BRIDGE_ROOT)? jazz-bridge init --root {layout.root} makes a new one"
            )
    prov = provision(settings, repair_homes=False)
    # an operator's --deep walks every home, repaired before or not (the marker only spares
    # the gateway's own first walk of a home after a start)
    deep = args.deep or args.force
    report = repair(
        prov.root, isolated=prov.isolated, registry=prov.registry, deep=deep, force=deep
    )
    data = report.as_dict()
    if args.json:
        _dump(data)
    else:
        _out(
            f"repaired {data['homes']} home(s): {data['checked']} entries checked, "
            f"{data['changed']} changed, {data['skipped']} skipped, {data['failed']} failed"
        )
        for err in report.top.errors + report.deep.errors:
            _out(f"  failed: {err}")
    return 0 if report.ok else 1


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
        _dump(rows)
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
            if args.json:
                _dump(data)
            else:
                for k, v in data.items():
                    if k not in ("recentRuns", "pendingPrompts"):
                        _out(f"{k:>16}: {v}")
                _out("     recent runs:")
                for r in data["recentRuns"]:
                    _out(
                        f"  #{r['id']} {r['started']} {r['outcome']} {r['durationMs']} ms "
                        f"{r['tokens']} tokens {r['cost']} {r['error'] or ''}".rstrip()
                    )
                _out(f" pending prompts: {len(data['pendingPrompts'])}")
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
        _out(str(would_be))
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
            _out(str(path))
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


def _table(rows: list[dict[str, Any]]) -> None:
    from ..operators import LIST_COLUMNS as cols

    table = [cols] + [[str(r[c]) for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    for row in table:
        _out("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


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
                    _dump(home.as_dict())
                else:
                    _out(str(home.path))
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
        _dump(rows)
        return
    for row in rows:
        if row["archived"]:
            _out(f"archived {row['threadKey']} -> {row['tarball']} ({row['sizeBytes']} bytes)")
        else:
            _out(f"not archived {row['threadKey']}: {row['reason']}")
    if not rows and idle_days is not None:
        _out(f"no home idle for {idle_days:g} days")


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
    _refuse_foreign_directory(settings)  # ensure makes a root when there is none
    prov = provision(settings, repair_homes=False)
    home = prov.homes.ensure(args.key)
    if args.json:
        _dump(home.as_dict())
    else:
        _out(str(home.path))
    return 0


def cmd_config(
    args: argparse.Namespace, settings: CoreSettings, specs: dict[str, AdapterSpec]
) -> int:
    from ..rules import require

    require(settings, specs)  # what serve would refuse to start with: the same line, exit 2
    source = getattr(settings, "_toml_file", None)
    log.info("configuration is valid (file: %s)", source or "none, defaults and environment")
    _dump(effective_config(settings))
    return 0


def cmd_doctor(
    args: argparse.Namespace, settings: CoreSettings, specs: dict[str, AdapterSpec]
) -> int:
    from provisioning.layout import Layout

    from ..runner import default_command
    from ..runner.dialect import runner_profile
    from .checks import config_checks, platform_checks, run_checks

    command, _reference = default_command(settings.runner.command)
    state = Layout(settings.root.absolute()).state
    profile = runner_profile(
        settings.runner, command, state if state.is_dir() else None, write=False
    )
    checks = config_checks(settings, specs) + run_checks(settings, command, profile=profile)
    checks += asyncio.run(platform_checks(settings, specs))
    if args.json:
        _dump([{"ok": c.ok, "warn": c.warn, "check": c.what, "fix": c.fix} for c in checks])
    else:
        for check in checks:
            _out(check.line())
    return 0 if all(c.ok for c in checks) else 1


# -- parser ------------------------------------------------------------------------------------


def _idle_days(text: str) -> float:
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


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        type=Path,
        default=argparse.SUPPRESS,
        help="TOML config file (else $JAZZ_BRIDGE_CONFIG or ./jazz-bridge.toml)",
    )
    common.add_argument(
        "--log-level", default=argparse.SUPPRESS, choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    root_opt = argparse.ArgumentParser(add_help=False)
    root_opt.add_argument("--root", help="the shared root (overrides the config's root)")

    parser = argparse.ArgumentParser(
        prog="jazz-bridge",
        description="Slack and Telegram gateway to Jazz agents",
        parents=[common],
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", parents=[common], help="run the gateway")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("init", parents=[common, root_opt], help="create or repair the root")
    p.add_argument("--operator-group", help="the operators' group (default: the root's group)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("repair", parents=[common, root_opt], help="repair modes and owners")
    p.add_argument("--deep", action="store_true", help="also walk every home's contents, each time")
    p.add_argument("--force", action="store_true", help="the same as --deep")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_repair)

    homes = sub.add_parser("homes", help="conversation homes")
    hs = homes.add_subparsers(dest="homes_cmd", required=True)
    p = hs.add_parser(
        "ensure", parents=[common, root_opt], help="create or repair the home of a thread key"
    )
    p.add_argument("key", help="thread key, e.g. slack:T0TEAM:C0CHAN:1764669600.000100")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_homes)
    p = hs.add_parser(
        "path",
        parents=[common, root_opt],
        help="print an existing home's path (exit 1 when there is none)",
    )
    p.add_argument("key", help="thread key, home path, Slack permalink or t.me link")
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # accepted, as before
    p.set_defaults(func=cmd_homes)

    p = hs.add_parser("list", parents=[common, root_opt], help="list conversations")
    p.add_argument("--platform", help="only this platform (slack, telegram, web)")
    p.add_argument("--active-since", help="only active since (7d, 12h, or 2026-12-01)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_homes)
    p = hs.add_parser(
        "show", parents=[common, root_opt], help="a conversation's runs, prompts and paths"
    )
    p.add_argument("key", help="thread key, home path, Slack permalink or t.me link")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_homes)
    p = hs.add_parser(
        "archive",
        parents=[common, root_opt],
        help="pack idle homes into <root>/archive/ (never one with a run, queue or prompt)",
    )
    p.add_argument("key", nargs="?", help="one conversation (else every home idle long enough)")
    p.add_argument(
        "--idle-days",
        type=_idle_days,
        metavar="N",
        help="only homes idle N days or more (N > 0; default retention.archive_idle_days)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_homes)
    p = hs.add_parser("restore", parents=[common, root_opt], help="bring an archived home back")
    p.add_argument("key", help="thread key, home path, Slack permalink or t.me link")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_homes)

    p = sub.add_parser("doctor", parents=[common, root_opt], help="check everything, with fixes")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_doctor)

    cfg = sub.add_parser("config", help="configuration")
    cs = cfg.add_subparsers(dest="config_cmd", required=True)
    p = cs.add_parser("check", parents=[common], help="validate and print the effective config")
    p.set_defaults(func=cmd_config)
    return parser


def _os_error(exc: OSError, root: Path | None) -> str:
    """An OSError as one line that says what is wrong with which path and what to do."""
    where = exc.filename
    if where is None:
        return str(exc)
    path = Path(os.fsdecode(where))
    if exc.errno == errno.ENOTDIR:
        blocker = next((p for p in [path, *path.parents] if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            return (
                f"{path}: {blocker} is a file, not a directory, so nothing can be made under "
                "it: pick another path"
                + (
                    " (--root, root, JAZZ_BRIDGE_ROOT)"
                    if root and root.is_relative_to(path)
                    else ""
                )
            )
    if exc.errno in (errno.EACCES, errno.EPERM) and root is not None and os.geteuid() != 0:
        try:
            inside = path.absolute().is_relative_to(root)
            group = grp.getgrgid(os.stat(root).st_gid).gr_name if inside else None
        except (OSError, KeyError):
            group = None
        if group is not None:
            return (
                f"permission denied: {path}: under {root} only the gateway and its operator "
                f"group {group!r} may read; be in it (usermod -aG {group} $USER), then log in "
                f"again or run newgrp {group} (a new membership counts from the next login)"
            )
    return str(exc)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "config"):
        args.config = None
    setup_logging(None, getattr(args, "log_level", None))
    root: Path | None = None
    try:
        specs = load_specs()
        settings = _settings(args, specs)
        root = settings.root.absolute()
        threaded = args.func is cmd_serve  # the one command with an event loop to keep free
        setup_logging(settings, getattr(args, "log_level", None), writer_thread=threaded)
        code: int = args.func(args, settings, specs)
        return code
    except (BridgeError, ProvisioningError, OSError) as exc:
        # OSError: a path that is not a directory, a file it may not read... its message
        # names the path and the reason; a traceback would add nothing for an operator
        logs.stop_writer()  # the lines logged before it come first
        text = _os_error(exc, root) if isinstance(exc, OSError) else str(exc)
        sys.stderr.write(f"jazz-bridge: error: {logs.mask(text)}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
