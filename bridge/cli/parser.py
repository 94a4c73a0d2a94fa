"""The ``jazz-bridge`` parser and dispatch: every command's options, and the one way errors end.

Each subcommand loads the configuration the same way ``serve`` does, so what an operator
checks is what the gateway runs with. Errors are one clear line on stderr and exit 2 (a
configuration error exits 78, EX_CONFIG); listings take ``--json``. The commands themselves
are in their modules (:mod:`.serve`, :mod:`.init`, :mod:`.repair`, :mod:`.homes`,
:mod:`.removal`, :mod:`.config_check`, :mod:`.doctor`). Which root a command acts on is
:mod:`.root_choice`'s (said on stderr by every command); a command whose root settings
differ from those the root was served with is warned, or refused, by :mod:`.served`.
"""

from __future__ import annotations

import argparse
import errno
import grp
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from provisioning.errors import ProvisioningError

from .. import logs
from ..config import CoreSettings, load_settings
from ..errors import BridgeError, ConfigError
from ..plugins import load_specs
from ..ports import AdapterSpec
from .config_check import cmd_config
from .console import setup_logging
from .doctor import cmd_doctor
from .homes import cmd_homes, idle_days_type
from .init import cmd_init
from .removal import register_removal
from .repair import cmd_repair
from .root_choice import choose_root
from .serve import cmd_serve
from .served import IGNORE_OPTION, check_served_settings

__all__ = ["EXIT_CONFIG", "EXIT_ERROR", "build_parser", "main"]

log = logging.getLogger("jazz_bridge")

EXIT_ERROR = 2
EXIT_CONFIG = 78  # sysexits.h EX_CONFIG, which systemd shows as status=78/CONFIG

EXIT_CODES = f"""exit status:
  0   done (doctor: every check OK or WARN)
  1   a check, or one of the items a command acts on, failed (said on stdout)
  {EXIT_ERROR}   an error: a wrong command line, a path, a refused command (one line on stderr)
  {EXIT_CONFIG}  the configuration is invalid or one serve refuses to start with (a bad or unknown
       key, a value that does not parse, a rule serve starts by): every configuration error
"""


def _settings(args: argparse.Namespace, specs: dict[str, AdapterSpec]) -> CoreSettings:
    """The settings as ``serve`` loads them, the root chosen as :mod:`.root_choice` says
    (``args.root_choice``: which and why)."""
    settings = load_settings(
        args.config, adapter_sections={k: s.settings_model for k, s in specs.items()}
    )
    configured_only = args.func in (cmd_serve, cmd_config)  # serve records what it is given
    choice = choose_root(
        getattr(args, "root", None), settings, os.environ, use_last_served=not configured_only
    )
    args.root_choice = choice
    updates: dict[str, Any] = {}
    if choice.root != settings.root.absolute():
        updates["root"] = choice.root
    if getattr(args, "operator_group", None):
        updates["operator_group"] = args.operator_group
    return settings.model_copy(update=updates) if updates else settings


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
    root_opt.add_argument(
        "--root",
        help="the shared root (else $JAZZ_BRIDGE_ROOT, the config's root, the last root "
        "served, ./jazz-bridge-home)",
    )
    changes = argparse.ArgumentParser(add_help=False)  # commands that change accounts or homes
    changes.add_argument(
        IGNORE_OPTION,
        dest="ignore_served_settings",
        action="store_true",
        help="go on although this command's root settings (isolation, operator group, uid "
        "range, home template) differ from those the root was served with",
    )

    parser = argparse.ArgumentParser(
        prog="jazz-bridge",
        description="Slack and Telegram gateway to Jazz agents",
        parents=[common],
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", parents=[common], help="run the gateway")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser(
        "init", parents=[common, root_opt, changes], help="create or repair the root"
    )
    p.add_argument("--operator-group", help="the operators' group (default: the root's group)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser(
        "repair", parents=[common, root_opt, changes], help="repair modes and owners"
    )
    p.add_argument("--deep", action="store_true", help="also walk every home's contents, each time")
    p.add_argument("--force", action="store_true", help="the same as --deep")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_repair)

    homes = sub.add_parser("homes", help="conversation homes")
    hs = homes.add_subparsers(dest="homes_cmd", required=True)
    p = hs.add_parser(
        "ensure",
        parents=[common, root_opt, changes],
        help="create or repair the home of a thread key",
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
        parents=[common, root_opt, changes],
        help="pack idle homes into <root>/archive/ (never one with a run, queue or prompt)",
    )
    p.add_argument("key", nargs="?", help="one conversation (else every home idle long enough)")
    p.add_argument(
        "--idle-days",
        type=idle_days_type,
        metavar="N",
        help="only homes idle N days or more (N > 0; default retention.archive_idle_days)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_homes)
    p = hs.add_parser(
        "restore", parents=[common, root_opt, changes], help="bring an archived home back"
    )
    p.add_argument("key", help="thread key, home path, Slack permalink or t.me link")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_homes)

    register_removal(sub, hs, [common, root_opt, changes])

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
        if threaded:  # serve: first, before its own lines
            log.info("acting on %s", args.root_choice.line())
        if args.func not in (cmd_serve, cmd_config):
            check_served_settings(
                settings,
                os.environ,
                changes=hasattr(args, "ignore_served_settings"),
                ignore=getattr(args, "ignore_served_settings", False),
            )
        code: int = args.func(args, settings, specs)
        if not threaded and code == 0:  # after its output: an error stays stderr's last line
            log.info("acted on %s", args.root_choice.line())
        return code
    except ConfigError as exc:
        logs.stop_writer()
        sys.stderr.write(f"jazz-bridge: error: {logs.mask(str(exc))}\n")
        return EXIT_CONFIG
    except (BridgeError, ProvisioningError, OSError) as exc:
        # OSError: a path that is not a directory, a file it may not read... its message
        # names the path and the reason; a traceback would add nothing for an operator
        logs.stop_writer()  # the lines logged before it come first
        text = _os_error(exc, root) if isinstance(exc, OSError) else str(exc)
        choice = getattr(args, "root_choice", None)
        if choice is not None and choice.source == "last-served":  # not said by the user
            text += f" (acting on {choice.line()})"
        sys.stderr.write(f"jazz-bridge: error: {logs.mask(text)}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
