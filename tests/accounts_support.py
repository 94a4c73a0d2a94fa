"""Throwaway accounts for tests: a free uid range, root checks, removing what a test made.

Its own module, not ``conftest``: every directory's ``conftest.py`` is imported under that one
name, so tests import helpers from here and take fixtures from the conftest files.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import secrets
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from bridge.runner.killer import AccountKillError, kill_account
from provisioning.accounts import AccountRegistry
from provisioning.homes import Homes

IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root (real accounts and groups)")


@dataclass(frozen=True)
class OperatorGroup:
    name: str
    gid: int
    member: str  # a throwaway human operator account in the group
    member_uid: int


# the uids this test session may take (JB_TEST_UID_BAND=LO-HI): scripts/test.sh runs two
# sessions at once (the documented and the released CLI's fakes), each in its own band
UID_BAND = tuple(int(n) for n in os.environ.get("JB_TEST_UID_BAND", "71000-78999").split("-"))


def free_uid_range(span: int = 200) -> tuple[int, int]:
    """A uid range nothing on this host uses (tests must never take over real accounts)."""
    band_lo, band_hi = UID_BAND
    slots = max((band_hi + 1 - span - band_lo) // 100 + 1, 1)
    for _ in range(100):
        lo = band_lo + secrets.randbelow(slots) * 100
        if all(_uid_free(u) for u in range(lo, lo + span)):
            return lo, lo + span - 1
    raise RuntimeError("no free uid range for tests")


def _uid_free(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return False
    except KeyError:
        pass
    try:
        grp.getgrgid(uid)
        return False
    except KeyError:
        return True


# the ``reclaiming_homes`` fixture: isolated homes on a range of this many uids
ReclaimingHomes = Callable[[int], tuple[Homes, AccountRegistry]]


def as_account(uid: int, gid: int, *argv: str) -> list[str]:
    """``argv`` run as ``uid``/``gid`` with no other group (what a conversation's run is)."""
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *argv]


def run_as(uid: int, gid: int, script: str) -> None:
    """Run a shell ``script`` as the account (bounded; it must succeed)."""
    subprocess.run(as_account(uid, gid, "/bin/sh", "-c", script), check=True, timeout=30)


def remove_accounts(map_path: Path) -> None:
    """Delete every account a test's uid map recorded (throwaway accounts), archived ones too.

    Whatever still runs as one is killed first: a test that failed may have left a runner's
    child behind (a fork chain left running loads the machine for every later test), and
    ``userdel`` refuses an account with processes.
    """
    try:
        data = json.loads(map_path.read_text())
    except (OSError, ValueError):
        return
    recorded = [*data.get("accounts", {}).values(), *data.get("archived", {}).values()]
    for entry in recorded:  # archived: reclaimed already, unless a test cut that off
        name = entry.get("name")
        if isinstance(name, str) and name.startswith("jb-"):
            uid = entry.get("uid")
            if isinstance(uid, int) and uid > 0:
                with contextlib.suppress(AccountKillError, ValueError):
                    kill_account(uid)
            subprocess.run(["userdel", name], check=False, capture_output=True)
            subprocess.run(["groupdel", name], check=False, capture_output=True)
