"""Layout (init) and homes: exact modes and owners, refusals, hostile thread keys."""

from __future__ import annotations

import grp
import os
import stat
import subprocess
from pathlib import Path

import pytest
from accounts_support import OperatorGroup, needs_root

from provisioning import naming
from provisioning.accounts import AccountRegistry
from provisioning.errors import LayoutError, OperatorGroupError, ThreadKeyError
from provisioning.homes import Homes
from provisioning.layout import init_root
from provisioning.modes import HOME_SUBDIRS


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def owner(path: Path) -> tuple[int, int]:
    st = os.lstat(path)
    return st.st_uid, st.st_gid


def test_init_creates_exact_modes_and_is_idempotent(tmp_path: Path) -> None:
    root = tmp_path / "r"
    info = init_root(root)
    assert mode(root) == 0o2751
    assert mode(root / "chats") == 0o2751
    assert mode(root / "personas") == 0o755
    assert mode(root / "state") & 0o007 == 0
    os.chmod(root, 0o777)
    os.chmod(root / "chats", 0o700)
    again = init_root(root)
    assert (mode(root), mode(root / "chats")) == (0o2751, 0o2751)
    assert again.operator_gid == info.operator_gid


def test_init_refuses_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(LayoutError, match="symbolic link"):
        init_root(tmp_path / "link")


def test_init_refuses_unknown_operator_group(tmp_path: Path) -> None:
    with pytest.raises(OperatorGroupError, match="does not exist"):
        init_root(tmp_path / "r", "no-such-group-jb")


@needs_root
def test_init_refuses_a_root_owned_by_another_account(tmp_path: Path) -> None:
    root = tmp_path / "theirs"
    root.mkdir()
    os.chown(root, 65534, 65534)
    with pytest.raises(LayoutError, match="owned by uid 65534"):
        init_root(root)


@needs_root
def test_operator_group_defaults_to_the_roots_group(
    tmp_path: Path, operator_group: OperatorGroup
) -> None:
    root = tmp_path / "r"
    root.mkdir()
    os.chown(root, 0, operator_group.gid)
    info = init_root(root)
    assert info.operator_gid == operator_group.gid
    assert owner(root) == (0, operator_group.gid)
    assert owner(root / "chats") == (0, operator_group.gid)


def test_home_names_are_safe_and_deterministic() -> None:
    keys = [
        "slack:T0TEAM:C0CHAN:1764669600.000100",
        "telegram:-1001234567890:42",
        "web:demo",
        "..",
        "../../etc/passwd",
        "/",
        "é" * 5000,
        "web:" + "x" * 3000,
        "A B\tC".replace("\t", " "),
    ]
    names = set()
    for key in keys:
        name = naming.home_name(key)
        assert name == naming.home_name(key)
        assert naming.is_home_name(name), name
        assert len(name) <= 65
        assert all(c in "abcdefghijklmnopqrstuvwxyz0123456789._-" for c in name)
        assert "/" not in name and name not in (".", "..")
        names.add(name)
    assert len(names) == len(keys)
    assert naming.home_name("web:demo").startswith("web-demo-")


@pytest.mark.parametrize("key", ["", "   ", "a\0b", "line\nbreak", "x" * 20000, "\ud800"])
def test_hostile_keys_are_refused_clearly(key: str) -> None:
    with pytest.raises(ThreadKeyError):
        naming.home_name(key)


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
    from provisioning.errors import UnsafePathError

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


def _as(uid: int, gid: int, *argv: str, init_groups: str | None = None) -> int:
    ident = (
        ["--reuid", str(uid), "--regid", str(gid), "--init-groups"]
        if init_groups
        else ["--reuid", str(uid), "--regid", str(gid), "--clear-groups"]
    )
    return subprocess.run(["setpriv", *ident, "--", *argv], capture_output=True).returncode


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
    rc = _as(b.account.uid, b.account.gid, "sh", "-c", f"umask 027; echo secret > {secret}")
    assert rc == 0
    assert owner(secret) == (b.account.uid, operator_group.gid)
    assert mode(secret) == 0o640
    assert _as(a.account.uid, a.account.gid, "cat", str(secret)) != 0
    assert _as(a.account.uid, a.account.gid, "ls", str(b.path)) != 0
    assert _as(a.account.uid, a.account.gid, "ls", str(info.layout.chats)) != 0  # not listable
    assert _as(a.account.uid, a.account.gid, "ls", str(info.layout.state)) != 0
    # a human in the operator group reads it
    op = operator_group
    assert _as(op.member_uid, op.gid, "cat", str(secret), init_groups=op.member) == 0
    assert _as(op.member_uid, op.gid, "ls", str(b.path), init_groups=op.member) == 0
