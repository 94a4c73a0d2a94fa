"""A conversation's home: exact modes and owners, refusals, what other conversations and the
operators can read, and that no ACL of the conversation's changes that."""

from __future__ import annotations

import grp
import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest
from accounts_support import OperatorGroup, needs_root
from home_support import NOBODY, as_nobody, as_uid, mode, owner

from provisioning import naming
from provisioning.accounts import AccountRegistry
from provisioning.archive_lock import home_lock
from provisioning.errors import UnsafePathError
from provisioning.homes import Home, Homes
from provisioning.layout import init_root
from provisioning.modes import HOME_SUBDIRS
from provisioning.repair import repair


def test_single_account_home_is_private(tmp_path: Path) -> None:
    info = init_root(tmp_path / "r")
    home = Homes(info, isolated=False).ensure("web:demo")
    assert home.path.parent == info.layout.chats
    assert mode(home.path) == 0o700
    for sub in HOME_SUBDIRS:
        assert mode(home.path / sub) == 0o700, sub
    assert mode(home.path / "gnupg") == 0o700
    assert mode(home.path / "config.json") == 0o600
    assert os.readlink(home.path / "personas") == str(info.layout.personas)
    assert owner(home.path)[0] == os.geteuid()


def test_home_refuses_a_planted_link(tmp_path: Path) -> None:
    info = init_root(tmp_path / "r")
    outside = tmp_path / "outside"
    outside.mkdir()
    (info.layout.chats / naming.home_name("web:x")).symlink_to(outside)
    with pytest.raises(UnsafePathError):
        Homes(info, isolated=False).ensure("web:x")
    assert list(outside.iterdir()) == []


@needs_root
def test_isolated_home_modes_and_owners(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    info = init_root(shared_root, operator_group.name)
    registry = AccountRegistry(info.layout, info.operator_gid, uid_range)
    home = Homes(info, isolated=True, registry=registry).ensure("slack:T0TEAM:C0CHAN:1.2")
    acct = home.account
    assert uid_range[0] <= acct.uid <= uid_range[1]
    assert acct.gid != operator_group.gid
    assert owner(home.path) == (acct.uid, operator_group.gid)
    assert mode(home.path) == 0o2750
    for sub in HOME_SUBDIRS:
        assert mode(home.path / sub) == 0o2750, sub
        assert owner(home.path / sub) == (acct.uid, operator_group.gid)
    assert mode(home.path / "gnupg") == 0o700
    assert owner(home.path / "gnupg") == (acct.uid, acct.gid)
    assert mode(home.path / "config.json") == 0o600
    # the private group is really private: the conversation account is not in O
    assert acct.name not in grp.getgrgid(operator_group.gid).gr_mem
    # ensure is idempotent and repairs
    os.chmod(home.path, 0o777)
    again = Homes(info, isolated=True, registry=registry).ensure("slack:T0TEAM:C0CHAN:1.2")
    assert again.account == acct
    assert mode(home.path) == 0o2750


@needs_root
def test_one_conversation_cannot_read_another_but_operators_can(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    info = init_root(shared_root, operator_group.name)
    homes = Homes(
        info, isolated=True, registry=AccountRegistry(info.layout, info.operator_gid, uid_range)
    )
    a = homes.ensure("web:alice")
    b = homes.ensure("web:bob")
    assert a.account.uid != b.account.uid
    # B writes a history file the way Jazz does in a setgid home (0640, group inherited)
    secret = b.path / "history" / "h.json"
    rc = as_uid(b.account.uid, b.account.gid, "sh", "-c", f"umask 027; echo secret > {secret}")
    assert rc.returncode == 0
    assert owner(secret) == (b.account.uid, operator_group.gid)
    assert mode(secret) == 0o640
    assert as_uid(a.account.uid, a.account.gid, "cat", str(secret)).returncode != 0
    assert as_uid(a.account.uid, a.account.gid, "ls", str(b.path)).returncode != 0
    # chats/ is not listable
    assert as_uid(a.account.uid, a.account.gid, "ls", str(info.layout.chats)).returncode != 0
    assert as_uid(a.account.uid, a.account.gid, "ls", str(info.layout.state)).returncode != 0
    # a human in the operator group reads it
    op = operator_group
    assert as_uid(op.member_uid, op.gid, "cat", str(secret), init_groups=True).returncode == 0
    assert as_uid(op.member_uid, op.gid, "ls", str(b.path), init_groups=True).returncode == 0


@needs_root
def test_homes_ensure_without_root_is_private(nobody_dir: Path) -> None:
    cli = [sys.executable, "-m", "bridge.cli"]
    init = as_nobody(*cli, "init", "--root", str(nobody_dir / "root"), "--json", cwd=nobody_dir)
    assert init.returncode == 0, init.stderr
    out = as_nobody(
        *cli,
        "homes",
        "ensure",
        "telegram:-100:42",
        "--root",
        str(nobody_dir / "root"),
        "--json",
        cwd=nobody_dir,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["isolated"] is False
    assert data["uid"] == NOBODY
    home = Path(data["path"])
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "config.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "workspace").stat().st_mode) == 0o700
    assert "not running as root" in out.stderr  # said once, plainly


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


def _plant(a: Home, b: Home) -> None:
    dirs = [str(a.path), str(a.path / "history")]
    done = as_uid(
        a.account.uid, a.account.gid, sys.executable, "-c", PLANT, str(b.account.uid), *dirs
    )
    if "Operation not supported" in done.stderr:
        pytest.skip("this file system has no POSIX ACLs")
    assert done.returncode == 0, done.stderr


def _operator_lists(op: OperatorGroup, path: Path) -> bool:
    return as_uid(op.member_uid, op.gid, "ls", str(path), init_groups=True).returncode == 0


def _check(op: OperatorGroup, a: Home, b: Home) -> None:
    for path in (a.path, a.path / "history"):
        assert _operator_lists(op, path), f"operators cannot list {path}"
        assert ACL_XATTR not in os.listxattr(path, follow_symlinks=False), path
        assert os.stat(path).st_mode & 0o7777 == 0o2750
    assert as_uid(b.account.uid, b.account.gid, "ls", str(a.path)).returncode != 0


@needs_root
def test_an_acl_on_a_home_is_removed_by_the_next_ensure_and_by_repair(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    """A conversation cannot hide its home from operators, or open it to another, with an ACL.

    The home repair puts a home back to ``2750 conv:O`` (docs/design.md "On disk": operators read
    every home, other conversations nothing). A conversation owns its home, so its agent
    could set a POSIX ACL on it (setfacl, or setxattr ``system.posix_acl_access``): the
    owning group's entry ``---`` with a mask ``r-x`` and a named entry for another
    conversation's account. The mode then read ``2750`` once the gateway's chmod had
    restored the setgid bit, so every later ensure and repair took the home for repaired:
    the operators could no longer list it (nor its history) for good, while the other
    conversation could. A conversation's table directories (the home, its standard
    subdirectories) lose any ACL when the gateway sets their exact mode."""
    info = init_root(shared_root, operator_group.name)
    registry = AccountRegistry(info.layout, info.operator_gid, uid_range)
    homes = Homes(info, isolated=True, registry=registry)
    a = homes.ensure("web:acl-a")
    b = homes.ensure("web:acl-b")
    assert _operator_lists(operator_group, a.path)

    _plant(a, b)
    assert not _operator_lists(operator_group, a.path)  # what the agent did
    assert as_uid(b.account.uid, b.account.gid, "ls", str(a.path)).returncode == 0
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
            assert as_uid(b.account.uid, b.account.gid, "ls", str(a.path)).returncode != 0
            Homes(info, isolated=True, registry=registry).ensure("web:acl-a")
            _check(operator_group, a, b)


def test_present_now_answers_at_once_and_steps_aside_while_the_home_is_locked(
    tmp_path: Path,
) -> None:
    """A turn asks without a thread: the answer now, or None while an archive or a restore
    holds the home's lock (the turn then waits for it in ``present``)."""
    info = init_root(tmp_path / "r")
    homes = Homes(info, isolated=False)
    home = homes.ensure("web:demo")
    assert homes.present_now(home) is True
    with home_lock(info, home.name, exclusive=True):  # as an archive of it holds it
        assert homes.present_now(home) is None
    with home_lock(info, home.name, exclusive=False):  # another run starting: no wait
        assert homes.present_now(home) is True
    shutil.rmtree(home.path)  # archived
    assert homes.present_now(home) is False
    assert homes.present(home) is False
