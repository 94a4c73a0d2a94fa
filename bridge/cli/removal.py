"""``jazz-bridge homes remove`` and ``jazz-bridge accounts remove-all``: conversations and
their Unix accounts removed for good.

Accounts made as root stayed in ``/etc/passwd`` after their conversations were done with
(and after the root itself was deleted). ``homes remove`` removes one conversation: its
home archived out of the way (or deleted with ``--delete``), its account and group
deleted, and a fresh Jazz conversation begun in the store, so the thread's next message
starts in a new home. ``accounts remove-all`` deletes every account of a root (only those
its uid map records, within its uid range) while no gateway serves it; the homes stay.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from ..config import CoreSettings
from ..errors import BridgeError
from ..ports import AdapterSpec
from .console import dump, out

REMOVE_HELP = """\
Remove a conversation for good. Refused while it has a run in progress, a queued
message, a prompt waiting or replies not yet delivered. Its home is packed into
<root>/archive/<home>.removed-<UTC time>.tar.gz (kept, never restored by itself), or
deleted with --delete; its account and private group are deleted (isolated roots); the
conversation's next message starts a fresh Jazz conversation in a new, empty home.
"""

REMOVE_ALL_HELP = """\
Delete every conversation account of the root from /etc/passwd (and their private
groups): only the accounts the root's uid map (state/accounts.json) records, within its
uid range (accounts.uid_min..uid_max); no other account is touched. Refused while a
jazz-bridge serve runs on the root: stop it first. The homes stay, owned by uids no
account has any more; the map keeps the accounts, so the next serve (or jazz-bridge
repair) makes them again with the same uids. To remove the homes too, remove the
conversations (homes remove) or the root. Without root (or isolation off) there are no
per-conversation accounts: it says so and exits 0.
"""


def register_removal(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    homes: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """``homes remove`` under ``homes``, and the ``accounts`` command group under ``sub``."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = homes.add_parser(
        "remove",
        parents=parents,
        help="remove a conversation: home archived (or --delete'd), account deleted",
        description=REMOVE_HELP,
        formatter_class=fmt,
    )
    p.add_argument("key", help="thread key, home path, Slack permalink or t.me link")
    p.add_argument("--delete", action="store_true", help="delete the home instead of archiving")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_remove)

    accounts = sub.add_parser("accounts", help="the root's conversation accounts")
    acs = accounts.add_subparsers(dest="accounts_cmd", required=True)
    p = acs.add_parser(
        "remove-all",
        parents=parents,
        help="delete every conversation account of the root (serve stopped; homes stay)",
        description=REMOVE_ALL_HELP,
        formatter_class=fmt,
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_accounts)


def _root_state(settings: CoreSettings) -> None:
    """A root no gateway has served (no store) has no conversation to remove: named."""
    from provisioning.layout import Layout

    layout = Layout(settings.root.absolute())
    if not layout.database.exists():
        raise BridgeError(
            f"no gateway state at {layout.database}: is root {layout.root} right (--root, "
            "root, JAZZ_BRIDGE_ROOT)?"
        )


def cmd_remove(args: argparse.Namespace, settings: CoreSettings, _: dict[str, AdapterSpec]) -> int:
    from provisioning.removal import Removal, remove_home

    from ..app import provision
    from ..operators import ArchiveBusy, Operators
    from ..store import SqliteStore
    from .homes import _no_conversation

    _root_state(settings)  # before provision(), which would make a whole root there
    prov = provision(settings, repair_homes=False)
    layout = prov.root.layout

    async def go() -> int:
        store = SqliteStore(layout.database)
        await store.open()
        try:
            ops = Operators(store, layout, prov.isolated, accounts=prov.registry)
            conv = await ops.find(args.key)
            if conv is None:
                raise BridgeError(_no_conversation(args.key))
            loop = asyncio.get_running_loop()

            def check() -> None:  # on the removing thread, under the home's lock
                reason = asyncio.run_coroutine_threadsafe(ops.busy_reason(conv), loop).result()
                if reason is not None:
                    raise ArchiveBusy(
                        f"{conv.thread_key} {reason}; it can be removed once it is idle"
                    )

            done: Removal = await asyncio.to_thread(
                remove_home, prov.root, conv.home, prov.registry, check, delete=args.delete
            )
            epoch = await store.new_epoch(conv.id)  # its next message: a fresh conversation
            data: dict[str, Any] = {
                "threadKey": conv.thread_key,
                **done.as_dict(),
                "epoch": epoch,
                "root": args.root_choice.as_dict(),
            }
            if args.json:
                dump(data)
                return 0
            out(f"removed {conv.thread_key} ({args.root_choice.line()}):")
            if done.tarball is not None:
                out(f"  home {done.home} archived to {done.tarball}")
            elif done.deleted:
                out(f"  home {done.home} deleted")
            else:
                out(f"  home {done.home}: none on disk")
            if done.account is not None:
                out(f"  account {done.account.name} (uid {done.account.uid}) and its group deleted")
            elif prov.isolated:
                out("  account: none left")
            else:
                out("  account: none (isolation off: it ran as the gateway's own account)")
            out(f"  its next message starts a fresh conversation (epoch {epoch}) in a new home")
            return 0
        finally:
            await store.close()

    return asyncio.run(go())


def cmd_accounts(
    args: argparse.Namespace, settings: CoreSettings, _: dict[str, AdapterSpec]
) -> int:
    from provisioning.accounts import AccountRegistry
    from provisioning.layout import Layout, resolve_operator_group
    from provisioning.sandbox import resolve_isolation

    from ..app import lock_root
    from ..runner.killer import kill_accounts

    choice = args.root_choice
    layout = Layout(settings.root.absolute())
    if os.geteuid() != 0 or not resolve_isolation(settings.isolation):
        why = "isolation is off" if settings.isolation == "off" else "not running as root"
        text = (
            f"no per-conversation accounts to remove at {choice.line()}: {why}, so every "
            "conversation runs as the gateway's own account"
        )
        if args.json:
            dump({"root": choice.as_dict(), "removed": [], "count": 0, "note": text})
        else:
            out(text)
        return 0
    if not layout.state.is_dir():
        raise BridgeError(
            f"no gateway state at {layout.root} (no state/ directory): is root right (--root, "
            "root, JAZZ_BRIDGE_ROOT)?"
        )
    lock = lock_root(layout.state)  # refused while serve runs; no serve starts meanwhile
    try:
        gid, _name = resolve_operator_group(settings.operator_group, layout.root)
        uid_range = (settings.accounts.uid_min, settings.accounts.uid_max)
        registry = AccountRegistry(layout, gid, uid_range, kill=kill_accounts)
        removed = registry.delete_system_accounts()
    finally:
        os.close(lock)
    rows = [{"home": home, "account": a.name, "uid": a.uid} for home, a in removed]
    if args.json:
        dump({"root": choice.as_dict(), "removed": rows, "count": len(rows)})
        return 0
    lo, hi = uid_range
    out(f"removed {len(rows)} conversation account(s) of {choice.line()}, uids {lo}-{hi}:")
    for row in rows:
        out(f"  {row['account']} (uid {row['uid']}) {row['home']}".rstrip())
    if rows:
        out(
            "their homes stay, owned by uids no account has now; the next jazz-bridge serve "
            f"(or jazz-bridge repair) makes the accounts again from {layout.uid_map}"
        )
    return 0
