"""Conversation accounts and the uid map: creation, recovery, never taking over others.

Accounts are real and throwaway (root): two roots on one host share the system's accounts,
and a map rebuilt from the homes' owners never names an account that is not a conversation's.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import subprocess
import threading
from pathlib import Path

import pytest
from accounts_support import OperatorGroup, ReclaimingHomes, needs_root, remove_accounts

from provisioning import naming
from provisioning.accounts import AccountRegistry
from provisioning.archive import archive_home
from provisioning.errors import AccountError, NewerSchemaError, UidRangeExhausted
from provisioning.homes import Homes
from provisioning.layout import init_root
from provisioning.reclaim import archive_and_reclaim

pytestmark = needs_root

ROUNDS = 6  # account creations raced between two roots


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
            remove_accounts(other_root / "state" / "accounts.json")
    finally:
        subprocess.run(["userdel", "jbforeign" + str(lo)], check=False)


def test_a_rebuilt_map_never_names_a_stranger_that_took_a_homes_uid(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    """A lost account map is rebuilt from the homes' owners, and a home's uid that another
    account now holds (a rebuilt container lost the conversation's account, and a user of
    the host, or of its directory service, got the uid since) was written into the map under
    that account's name: the conversation then ran as that stranger, and every start of the
    gateway killed all of the stranger's processes (``owned_uids``: its name matched the
    map). Without a lost map the same conflict is refused ("never taken over"); the rebuild
    refuses it the same way."""
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


def test_a_lost_map_gives_an_archived_home_its_own_uid_back(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    homes, _ = _setup(shared_root, operator_group, uid_range)
    archived = homes.ensure("web:sleeping")
    (archived.path / "history" / "conv.jsonl").write_text("A's history\n")
    os.chown(archived.path / "history" / "conv.jsonl", archived.account.uid, operator_group.gid)
    homes.ensure("web:awake")  # another home, on disk
    archive_home(homes.root, archived.name)
    (shared_root / "state" / "accounts.json").write_text("{ not json")  # the map is lost
    fresh, _ = _setup(shared_root, operator_group, uid_range)
    back = fresh.ensure("web:sleeping")  # rebuilt map, then the restore
    assert back.account.uid == archived.account.uid
    st = (back.path / "history" / "conv.jsonl").stat()
    assert st.st_uid == back.account.uid


def test_a_uid_taken_before_its_account_was_made_is_replaced_while_the_home_is_empty(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    """The map names a uid (a crash before useradd, or another gateway on this host took
    it meanwhile); with nothing of the home on disk yet, another uid is taken."""
    homes, registry = _setup(shared_root, operator_group, uid_range)
    lo, _hi = uid_range
    name = naming.home_name("web:late")
    map_path = shared_root / "state" / "accounts.json"
    doc = {
        "schemaVersion": 1,
        "root": str(shared_root),
        "uidRange": list(uid_range),
        "accounts": {name: {"name": "jb-late0000", "uid": lo, "gid": lo, "created": "x"}},
    }
    map_path.write_text(json.dumps(doc))
    squatter = f"jbsquat{lo}"
    subprocess.run(
        ["useradd", "--system", "--uid", str(lo), "--no-create-home", squatter], check=True
    )
    made: list[str] = []
    try:
        home = homes.ensure("web:late")
        made.append(home.account.name)  # the map is rewritten below: removed by hand
        assert home.account.uid != lo
        assert pwd.getpwnam(home.account.name).pw_uid == home.account.uid
        saved = json.loads(map_path.read_text())["accounts"][name]
        assert saved["uid"] == home.account.uid
        # a home with files keeps its uid: the same conflict is then an error to resolve
        other = naming.home_name("web:kept")
        doc["accounts"] = {other: {"name": "jb-kept0000", "uid": lo, "gid": lo, "created": "x"}}
        map_path.write_text(json.dumps(doc))
        (shared_root / "chats" / other).mkdir()
        with pytest.raises(AccountError, match="never taken over"):
            registry.ensure(other)
    finally:
        for name in [squatter, *made]:
            subprocess.run(["userdel", name], check=False)
            subprocess.run(["groupdel", name], check=False, capture_output=True)


def test_two_roots_creating_accounts_at_once_both_succeed(
    tmp_path: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    """Two gateways on one host (two roots) whose uid ranges overlap, each creating an
    account for a new conversation at the same moment. ``AccountRegistry.ensure`` promises
    that a uid another account took "by then" is replaced while the home has no files yet;
    its file lock only serialises one root, so two roots picked the same free uid and the
    loser's ``groupadd --gid`` failed: that conversation's first message failed with
    "groupadd: GID ... already exists" instead of getting the next uid."""
    a = init_root(tmp_path / "a", operator_group.name)
    b = init_root(tmp_path / "b", operator_group.name)
    registries = [AccountRegistry(info.layout, info.operator_gid, uid_range) for info in (a, b)]
    groups_before = {g.gr_name for g in grp.getgrall()}
    failures: list[str] = []
    try:
        for n in range(ROUNDS):
            barrier = threading.Barrier(2)

            def make(
                registry: AccountRegistry,
                which: str,
                n: int = n,
                barrier: threading.Barrier = barrier,
            ) -> None:
                barrier.wait(30)
                try:
                    registry.ensure(f"web-race{n}{which}-0123456789abcdef", f"web:race{n}{which}")
                except AccountError as exc:
                    failures.append(f"round {n} root {which}: {exc}")

            threads = [
                threading.Thread(target=make, args=(reg, which), daemon=True)
                for reg, which in zip(registries, "ab", strict=True)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
                assert not t.is_alive()
            if failures:
                break
    finally:
        remove_accounts(a.layout.uid_map)
        remove_accounts(b.layout.uid_map)
    assert not failures, failures
    # the loser of a race had made its private group (both groupadds can pass with one gid):
    # it is removed with the attempt, not left behind at the winner's gid
    stray = {g.gr_name: g.gr_gid for g in grp.getgrall()}.keys() - groups_before
    assert not {n for n in stray if n.startswith("jb-")}, stray


def test_only_uids_still_owned_by_their_accounts_are_acted_on(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    """The start-up kill reaches only accounts that are still this gateway's: not a uid
    another account took since, nor a map entry that is no account's uid at all."""
    homes, registry = _setup(shared_root, operator_group, uid_range)
    mine = homes.ensure("web:owned").account
    doc = json.loads((shared_root / "state" / "accounts.json").read_text())
    doc["accounts"]["taken-0000000000000000"] = {"name": "jb-taken", "uid": 65534, "gid": 65534}
    doc["accounts"]["flag-0000000000000000"] = {"name": "jb-flag", "uid": True, "gid": 1}
    doc["accounts"]["minus-000000000000000"] = {"name": "jb-minus", "uid": -1, "gid": 1}
    (shared_root / "state" / "accounts.json").write_text(json.dumps(doc))
    fresh = AccountRegistry(registry.layout, operator_group.gid, uid_range)
    assert fresh.owned_uids() == {mine.uid}  # 65534 is nobody's, not jb-taken's


# -- archived conversations give their accounts back ---------------------------------------


def _gone(name: str, uid: int) -> bool:
    try:
        pwd.getpwnam(name)
        return False
    except KeyError:
        pass
    try:
        pwd.getpwuid(uid)
        return False
    except KeyError:
        return True


def test_archiving_frees_the_uid_of_a_full_range_for_a_new_conversation(
    reclaiming_homes: ReclaimingHomes,
) -> None:
    homes, registry = reclaiming_homes(3)
    made = [homes.ensure(f"web:full{n}") for n in range(3)]
    assert registry.usage() == (3, 3)
    with pytest.raises(UidRangeExhausted):
        homes.ensure("web:one-too-many")
    first = made[0]
    archive_and_reclaim(homes.root, first.name, registry)
    assert _gone(first.account.name, first.account.uid)  # account and uid gone from passwd
    assert registry.usage() == (2, 3)  # the 80% warnings and /metrics count live ones only
    doc = json.loads((homes.root.layout.uid_map).read_text())
    assert first.name not in doc["accounts"]
    assert doc["archived"][first.name]["uid"] == first.account.uid
    newcomer = homes.ensure("web:one-too-many")
    assert newcomer.account.uid == first.account.uid  # the only uid left: the freed one
    assert pwd.getpwuid(newcomer.account.uid).pw_name == newcomer.account.name
    assert registry.usage() == (3, 3)


def test_never_used_uids_are_handed_out_before_freed_ones(
    reclaiming_homes: ReclaimingHomes,
) -> None:
    homes, registry = reclaiming_homes(3)
    a = homes.ensure("web:early")
    homes.ensure("web:middle")
    archive_and_reclaim(homes.root, a.name, registry)
    late = homes.ensure("web:late")
    lo = registry.uid_range[0]
    assert late.account.uid == lo + 2  # never used, though lo (freed) is lower


def test_a_restored_conversation_gets_its_old_uid_back_when_it_is_free(
    reclaiming_homes: ReclaimingHomes, operator_group: OperatorGroup
) -> None:
    homes, registry = reclaiming_homes(3)
    home = homes.ensure("web:sleeper")
    notes = home.path / "workspace" / "notes.md"
    notes.write_text("before\n")
    os.chown(notes, home.account.uid, operator_group.gid)
    archive_and_reclaim(homes.root, home.name, registry)
    assert _gone(home.account.name, home.account.uid)
    back = homes.ensure("web:sleeper")  # restore_if_archived, from ensure
    assert back.account == home.account  # same uid, gid and name
    assert pwd.getpwnam(back.account.name).pw_uid == home.account.uid
    assert notes.read_text() == "before\n"
    assert (notes.stat().st_uid, notes.stat().st_gid) == (home.account.uid, operator_group.gid)
    doc = json.loads(homes.root.layout.uid_map.read_text())
    assert home.name in doc["accounts"] and home.name not in doc["archived"]
    assert registry.usage() == (1, 3)


def test_a_restored_conversation_whose_uid_was_taken_gets_another_and_its_files_follow(
    reclaiming_homes: ReclaimingHomes, operator_group: OperatorGroup
) -> None:
    homes, registry = reclaiming_homes(2)
    a = homes.ensure("web:away")
    b = homes.ensure("web:other")
    old_uid, old_gid = a.account.uid, a.account.gid
    files = {
        "workspace/notes.md": (old_uid, operator_group.gid),  # conv:O, as files land
        "gnupg/key": (old_uid, old_gid),  # conv:conv, the private group
        "workspace/root-made": (0, operator_group.gid),  # not the account's: stays as stored
    }
    for rel, (uid, gid) in files.items():
        (a.path / rel).write_text(rel)
        os.chown(a.path / rel, uid, gid)
    archive_and_reclaim(homes.root, a.name, registry)
    c = homes.ensure("web:newcomer")
    assert c.account.uid == old_uid  # the only free uid: a's
    archive_and_reclaim(homes.root, b.name, registry)  # frees the other
    back = homes.ensure("web:away")
    assert back.account.uid == b.account.uid != old_uid  # a fresh (here: b's freed) uid
    new_uid, new_gid = back.account.uid, back.account.gid
    expect = {
        "workspace/notes.md": (new_uid, operator_group.gid),
        "gnupg/key": (new_uid, new_gid),
        "workspace/root-made": (0, operator_group.gid),
    }
    for rel, owner in expect.items():
        st = os.lstat(back.path / rel)
        assert (st.st_uid, st.st_gid) == owner, rel
    st = os.lstat(back.path)
    assert (st.st_uid, st.st_gid) == (new_uid, operator_group.gid)
    owners = {os.lstat(p).st_uid for p in back.path.rglob("*")}
    assert old_uid not in owners  # nothing of the home is c's now
    assert c.account.uid == pwd.getpwnam(c.account.name).pw_uid  # c untouched
