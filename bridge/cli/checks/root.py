"""Doctor's checks of the root: its directories' modes, the operator group, each home's
mode and owner and its account against the uid map, the uid range's use; then the home
template's and the runner's checks (:func:`run_checks` is every check of the root and what
runs in it).

The homes are judged by the root's rules, not by who runs doctor: an operator's process
cannot switch users, yet the root's homes are isolated.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import stat
from pathlib import Path

from provisioning import naming
from provisioning.accounts import USAGE_WARN_AT
from provisioning.layout import Layout
from provisioning.modes import (
    ARCHIVE_DIR_MODE,
    CHATS_MODE,
    HOME_MODE,
    PERSONAS_MODE,
    PRIVATE_DIR_MODE,
    ROOT_MODE,
    STATE_DIR_MODE,
    TOOLS_DIR_MODE,
)
from provisioning.sandbox import resolve_isolation

from ...config import CoreSettings
from ...runner.dialect import CliProfile
from .check import Check
from .runner import cli_checks, runner_checks
from .template import home_template_checks


def _mode_check(path: Path, want: int, label: str) -> Check:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return Check(False, f"{label} {path} exists", "run jazz-bridge init")
    if stat.S_ISLNK(st.st_mode):
        return Check(
            False,
            f"{label} {path} is not a link",
            f"serve refuses a link there: put the directory itself at {path} (a bind mount "
            "can keep it on another disk)",
        )
    if not stat.S_ISDIR(st.st_mode):
        return Check(
            False, f"{label} {path} is a directory", "move it away, then run jazz-bridge init"
        )
    mode = stat.S_IMODE(st.st_mode)
    return Check(
        mode == want, f"{label} {path} mode {mode:04o} (want {want:04o})", "run jazz-bridge repair"
    )


def root_isolated(settings: CoreSettings, layout: Layout) -> bool:
    """Whether the root's homes are isolated (an account each), judged by the root, not by
    this process: an operator (a member of the operator group, not root) runs doctor on the
    root a root gateway made, and its own process switching no users says nothing about
    those homes. As :func:`bridge.cli.homes._operators` takes it: the root's accounts are in its uid
    map. ``off`` is the configuration's word (serve runs single-account, whatever is on disk)
    and ``on`` refuses to start without the means, so only ``auto`` looks at the map."""
    if settings.isolation != "auto":
        return settings.isolation == "on"
    # os.path: an outsider may not look into state/ (Path.exists raises for that)
    return resolve_isolation(settings.isolation) or os.path.exists(layout.uid_map)


def run_checks(
    settings: CoreSettings, runner_command: list[str], *, profile: CliProfile | None = None
) -> list[Check]:
    """Every check of the root, the homes and the runner. ``profile``: which CLI the runner
    is (:mod:`bridge.runner.dialect`); the released one needs a home template (see
    :func:`home_template_checks`) and a private ``/proc`` for its runs."""
    released_cli = profile is not None and profile.released
    layout = Layout(settings.root.absolute())
    checks = [_mode_check(layout.root, ROOT_MODE, "root")]
    checks.append(_mode_check(layout.chats, CHATS_MODE, "chats"))
    checks.append(_mode_check(layout.personas, PERSONAS_MODE, "personas"))
    # the rest of the root as serve takes it: a link or a file there and it will not start
    checks.append(_mode_check(layout.state, STATE_DIR_MODE, "state"))
    for path, want, label in (
        (layout.archive, ARCHIVE_DIR_MODE, "archive"),
        (layout.tools, TOOLS_DIR_MODE, "tools"),
    ):
        if os.path.lexists(path):  # else serve makes it
            checks.append(_mode_check(path, want, label))
    try:
        gid = os.lstat(layout.root).st_gid
        group = grp.getgrgid(gid)
        members = ", ".join(group.gr_mem) or "no members"
        checks.append(Check(True, f"operator group {group.gr_name} ({members})"))
    except (OSError, KeyError):
        checks.append(
            Check(
                False,
                "operator group exists",
                "create it (groupadd) and run jazz-bridge init --operator-group",
            )
        )
        gid = -1
    isolated = root_isolated(settings, layout)
    try:
        entries = os.listdir(layout.chats)
    except PermissionError:
        # chats/ is listable by the gateway and its operators only: every home unseen here
        # is a home not checked, which must not pass as all well
        entries = []
        checks.append(Check(False, f"homes in {layout.chats} readable", _outsider_fix(gid)))
    except OSError:
        entries = []  # missing: the chats check above says so
    homes = sorted(e for e in entries if naming.is_home_name(e))
    accounts: dict[str, dict[str, object]] = {}
    try:
        accounts = _uid_map_entries(json.loads(layout.uid_map.read_text()))
    except PermissionError:
        pass  # an outsider: named by the check above
    except (OSError, ValueError):
        if isolated and entries:
            checks.append(
                Check(
                    False,
                    f"uid map {layout.uid_map} readable",
                    "jazz-bridge repair rebuilds it from the homes",
                )
            )
    if isolated and accounts:
        checks.append(uid_range_check(settings, accounts))
    for name in homes:
        path = layout.chats / name
        st = os.lstat(path)
        mode = stat.S_IMODE(st.st_mode)
        if isolated:
            entry = accounts.get(name)
            uid = entry.get("uid") if entry else None
            acct = str(entry.get("name")) if entry else "?"
            try:
                exists = pwd.getpwnam(acct).pw_uid == uid
            except KeyError:
                exists = False
            checks.append(
                Check(
                    exists,
                    f"account {acct} of {name} exists with uid {uid}",
                    "run jazz-bridge repair (or restart the gateway): it recreates accounts "
                    "lost from /etc/passwd",
                )
            )
            good = mode == HOME_MODE and st.st_uid == uid and st.st_gid == gid
            checks.append(
                Check(
                    good,
                    f"home {name} {mode:04o} {st.st_uid}:{st.st_gid} "
                    f"(want {HOME_MODE:04o} {uid}:{gid})",
                    "run jazz-bridge repair",
                )
            )
        else:
            checks.append(
                Check(
                    mode == PRIVATE_DIR_MODE,
                    f"home {name} mode {mode:04o} (want {PRIVATE_DIR_MODE:04o})",
                    "run jazz-bridge repair",
                )
            )
    checks += home_template_checks(
        settings.runner.home_template, settings.runner.agent, released_cli=released_cli
    )
    checks += runner_checks(settings, runner_command, isolated)
    return checks + (cli_checks(settings, profile, isolated) if profile is not None else [])


def uid_range_check(settings: CoreSettings, accounts: dict[str, dict[str, object]]) -> Check:
    """How much of accounts.uid_min..uid_max conversation accounts hold: a WARN from 80%
    (accounts are kept, archived conversations' too; when all are taken no new
    conversation can start)."""
    lo, hi = settings.accounts.uid_min, settings.accounts.uid_max
    uids = [e.get("uid") for e in accounts.values()]
    used = sum(1 for u in uids if isinstance(u, int) and lo <= u <= hi)
    capacity = hi - lo + 1
    share = used / capacity
    return Check(
        True,
        f"uid range {lo}-{hi}: {used} of {capacity} held by conversations ({share:.0%})",
        "widen accounts.uid_min..uid_max into uids no other account uses before it is full",
        warn=share >= USAGE_WARN_AT[0],
    )


def _outsider_fix(gid: int) -> str:
    try:
        group = grp.getgrgid(gid).gr_name
    except (KeyError, OverflowError):
        group = str(gid)
    return (
        f"doctor runs as uid {os.geteuid()}, which may not read them: run it as the gateway's "
        f"account or as a member of the operator group {group} (usermod -aG {group} $USER, "
        f"then log in again or run newgrp {group})"
    )


def _uid_map_entries(data: object) -> dict[str, dict[str, object]]:
    """The uid map's entries (home name -> its account), or ValueError when the file is
    JSON of another shape (a list, an entry that is not a table): reported, not a crash."""
    accounts = data.get("accounts") if isinstance(data, dict) else None
    if not isinstance(accounts, dict) or not all(isinstance(e, dict) for e in accounts.values()):
        raise ValueError('not a uid map ({"accounts": {home: {...}}})')
    return accounts
