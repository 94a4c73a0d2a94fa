"""A conversation cannot hide its home from operators, or open it to another, with an ACL.

The home repair puts a home back to ``2750 conv:O`` (docs/design.md "On disk": operators read
every home, other conversations nothing). A conversation owns its home, so its agent could
set a POSIX ACL on it (setfacl, or setxattr ``system.posix_acl_access``): the owning
group's entry ``---`` with a mask ``r-x`` and a named entry for another conversation's
account. The mode then reads ``2750`` once the gateway's chmod has restored the setgid bit,
so every later ensure and repair took the home for repaired: the operators could no longer
list it (nor its history) for good, while the other conversation could. A conversation's
table directories (the home, its standard subdirectories) now lose any ACL when the
gateway sets their exact mode.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from accounts_support import OperatorGroup, needs_root

from provisioning.accounts import AccountRegistry
from provisioning.homes import Home, Homes
from provisioning.layout import init_root
from provisioning.repair import repair

ACL_XATTR = "system.posix_acl_access"

# What the agent runs as its own account: setfacl -m u::rwx,u:B:rx,g::-,m::rx,o::- DIR...
PLANT = r"""
import os, struct, sys
other = int(sys.argv[1])
entries = [(0x01, 7, 0xFFFFFFFF), (0x02, 5, other), (0x04, 0, 0xFFFFFFFF),
           (0x10, 5, 0xFFFFFFFF), (0x20, 0, 0xFFFFFFFF)]
acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)
for path in sys.argv[2:]:
    os.setxattr(path, "system.posix_acl_access", acl)
"""


def _as(uid: int, gid: int, *argv: str, groups: bool = False) -> subprocess.CompletedProcess[str]:
    ident = ["--init-groups"] if groups else ["--clear-groups"]
    return subprocess.run(
        ["setpriv", "--reuid", str(uid), "--regid", str(gid), *ident, "--", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _plant(a: Home, b: Home) -> None:
    dirs = [str(a.path), str(a.path / "history")]
    done = _as(a.account.uid, a.account.gid, sys.executable, "-c", PLANT, str(b.account.uid), *dirs)
    if "Operation not supported" in done.stderr:
        pytest.skip("this file system has no POSIX ACLs")
    assert done.returncode == 0, done.stderr


def _operator_lists(op: OperatorGroup, path: Path) -> bool:
    return _as(op.member_uid, op.gid, "ls", str(path), groups=True).returncode == 0


def _check(op: OperatorGroup, a: Home, b: Home) -> None:
    for path in (a.path, a.path / "history"):
        assert _operator_lists(op, path), f"operators cannot list {path}"
        assert ACL_XATTR not in os.listxattr(path, follow_symlinks=False), path
        assert os.stat(path).st_mode & 0o7777 == 0o2750
    assert _as(b.account.uid, b.account.gid, "ls", str(a.path)).returncode != 0


@needs_root
def test_an_acl_on_a_home_is_removed_by_the_next_ensure_and_by_repair(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    info = init_root(shared_root, operator_group.name)
    registry = AccountRegistry(info.layout, info.operator_gid, uid_range)
    homes = Homes(info, isolated=True, registry=registry)
    a = homes.ensure("web:acl-a")
    b = homes.ensure("web:acl-b")
    assert _operator_lists(operator_group, a.path)

    _plant(a, b)
    assert not _operator_lists(operator_group, a.path)  # what the agent did
    assert _as(b.account.uid, b.account.gid, "ls", str(a.path)).returncode == 0
    # the conversation's next message in a new process
    Homes(info, isolated=True, registry=registry).ensure("web:acl-a")
    _check(operator_group, a, b)

    # the start-up repair, whether the ACL left the mode off the table (the kernel drops the
    # setgid bit of a non-member's ACL) or a gateway that knew no better chmod'ed it back
    for chmod_back in (False, True):
        for deep in (False, True):
            _plant(a, b)
            if chmod_back:
                for path in (a.path, a.path / "history"):
                    os.chmod(path, 0o2750)
            assert not _operator_lists(operator_group, a.path)
            report = repair(info, isolated=True, registry=registry, deep=deep, force=deep)
            assert report.ok, report.as_dict()
            assert _operator_lists(operator_group, a.path), (chmod_back, deep)
            assert ACL_XATTR not in os.listxattr(a.path, follow_symlinks=False)
            assert _as(b.account.uid, b.account.gid, "ls", str(a.path)).returncode != 0
            Homes(info, isolated=True, registry=registry).ensure("web:acl-a")
            _check(operator_group, a, b)
