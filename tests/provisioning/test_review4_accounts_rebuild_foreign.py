"""Review: a lost account map is rebuilt from the homes' owners, and a home's uid that
another account now holds (a rebuilt container lost the conversation's account, and a user
of the host, or of its directory service, got the uid since) was written into the map
under that account's name: the conversation then ran as that stranger, and every start of
the gateway killed all of the stranger's processes (``owned_uids``: its name matched the
map). Without a lost map the same conflict is refused ("never taken over"); the rebuild
now refuses it the same way.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from accounts_support import OperatorGroup, needs_root

from provisioning.accounts import AccountRegistry
from provisioning.errors import AccountError
from provisioning.homes import Homes
from provisioning.layout import init_root

pytestmark = needs_root


def test_a_rebuilt_map_never_names_a_stranger_that_took_a_homes_uid(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    info = init_root(shared_root, operator_group.name)
    registry = AccountRegistry(info.layout, info.operator_gid, uid_range)
    home = Homes(info, isolated=True, registry=registry).ensure("web:lost")
    uid = home.account.uid
    # the container is rebuilt: the account is gone; a user of the host gets its uid
    subprocess.run(["userdel", home.account.name], check=True)
    subprocess.run(["groupdel", home.account.name], check=False, capture_output=True)
    stranger = f"jbstranger{uid}"
    subprocess.run(
        ["useradd", "--system", "--uid", str(uid), "--no-create-home", stranger], check=True
    )
    try:
        (shared_root / "state" / "accounts.json").write_text("{ not json")  # and the map
        fresh = AccountRegistry(info.layout, info.operator_gid, uid_range)
        # what the start-up kill acts on: never the stranger's processes
        assert uid not in fresh.owned_uids()
        with pytest.raises(AccountError, match="never taken over"):
            fresh.ensure(home.name, "web:lost")
        assert all(a.name != stranger for a in fresh.all().values())
    finally:
        subprocess.run(["userdel", stranger], check=False)
        subprocess.run(["groupdel", stranger], check=False, capture_output=True)
