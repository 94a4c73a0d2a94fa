"""Conversation accounts and the uid map: creation, recovery, never taking over others."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from pathlib import Path

import pytest
from accounts_support import OperatorGroup, needs_root

from provisioning import naming
from provisioning.accounts import AccountRegistry
from provisioning.errors import NewerSchemaError
from provisioning.homes import Homes
from provisioning.layout import init_root

pytestmark = needs_root


def _setup(
    root: Path, group: OperatorGroup, uid_range: tuple[int, int]
) -> tuple[Homes, AccountRegistry]:
    info = init_root(root, group.name)
    registry = AccountRegistry(info.layout, info.operator_gid, uid_range)
    return Homes(info, isolated=True, registry=registry), registry


def test_account_shape(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    homes, _ = _setup(shared_root, operator_group, uid_range)
    home = homes.ensure("telegram:-1001234567890:42")
    pw = pwd.getpwnam(home.account.name)
    assert len(pw.pw_name) <= 31 and naming.ACCOUNT_NAME_RE.match(pw.pw_name)
    assert pw.pw_shell.endswith(("nologin", "false"))
    assert pw.pw_dir == str(home.path)
    assert pw.pw_gid == pw.pw_uid  # private primary group
    doc = json.loads((shared_root / "state" / "accounts.json").read_text())
    assert doc["schemaVersion"] == 1
    assert doc["accounts"][home.name]["uid"] == home.account.uid
    assert oct(os.stat(shared_root / "state" / "accounts.json").st_mode & 0o777) == "0o640"


def test_missing_accounts_are_recreated_from_the_map(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    homes, registry = _setup(shared_root, operator_group, uid_range)
    home = homes.ensure("web:rebuilt-container")
    name, uid = home.account.name, home.account.uid
    subprocess.run(["userdel", name], check=True)
    subprocess.run(["groupdel", name], check=False, capture_output=True)
    made = registry.recreate_missing()
    assert [a.name for a in made] == [name]
    assert pwd.getpwnam(name).pw_uid == uid


def test_corrupt_map_is_moved_aside_and_rebuilt_without_reassigning(
    shared_root: Path,
    operator_group: OperatorGroup,
    uid_range: tuple[int, int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    homes, _ = _setup(shared_root, operator_group, uid_range)
    a = homes.ensure("web:a")
    b = homes.ensure("web:b")
    map_path = shared_root / "state" / "accounts.json"
    map_path.write_text("{not json")
    homes2, _registry2 = _setup(shared_root, operator_group, uid_range)
    c = homes2.ensure("web:c")  # a new conversation after the loss
    assert c.account.uid not in (a.account.uid, b.account.uid)
    assert homes2.ensure("web:a").account.uid == a.account.uid
    assert homes2.ensure("web:b").account.uid == b.account.uid
    assert list(map_path.parent.glob("accounts.json.corrupt-*"))
    assert "moved it aside" in caplog.text


def test_foreign_uid_and_name_are_never_taken_over(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    lo, _ = uid_range
    # another account on the host already sits on the first uid of our range
    subprocess.run(
        ["useradd", "--system", "--uid", str(lo), "--no-create-home", "jbforeign" + str(lo)],
        check=True,
    )
    try:
        homes, _ = _setup(shared_root, operator_group, uid_range)
        home = homes.ensure("web:x")
        assert home.account.uid != lo
        assert pwd.getpwuid(lo).pw_name == "jbforeign" + str(lo)
        # a second gateway with another root derives different names
        other_root = shared_root.parent / "root2"
        homes2, _ = _setup(other_root, operator_group, uid_range)
        try:
            home2 = homes2.ensure("web:x")
            assert home2.account.name != home.account.name
            assert home2.account.uid != home.account.uid
        finally:
            from accounts_support import remove_accounts

            remove_accounts(other_root / "state" / "accounts.json")
    finally:
        subprocess.run(["userdel", "jbforeign" + str(lo)], check=False)


def test_newer_map_is_refused_and_left_untouched(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    homes, _ = _setup(shared_root, operator_group, uid_range)
    map_path = shared_root / "state" / "accounts.json"
    data = b'{"schemaVersion": 99, "accounts": {}}\n'
    map_path.write_bytes(data)
    with pytest.raises(NewerSchemaError, match="newer"):
        homes.ensure("web:y")
    assert map_path.read_bytes() == data
