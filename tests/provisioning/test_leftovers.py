"""A freed uid serves another conversation only once nothing of its last holder is left.

The accounts are real (root): a conversation leaves files, a setuid shell, a FIFO, a
shared-memory segment and a process behind outside its home, is archived (its account
given back), and a new conversation is handed the same uid.
"""

from __future__ import annotations

import os
import select
import stat
import struct
import subprocess
from pathlib import Path

import pytest
from accounts_support import ReclaimingHomes, as_account, needs_root, run_as

from provisioning import leftovers
from provisioning.accounts import AccountRegistry
from provisioning.errors import UidRangeExhausted
from provisioning.homes import Homes
from provisioning.reclaim import archive_and_reclaim

pytestmark = needs_root

WAIT_S = 30  # bound on a lingering process's end once it was killed
# the kernel's form of a POSIX ACL (system.posix_acl_access): version, then entries of
# (tag, permissions, id), sorted by tag
ACL_VERSION = 2
ACL_USER_OBJ, ACL_USER, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER = 0x01, 0x02, 0x04, 0x10, 0x20
ACL_UNDEFINED_ID = 0xFFFFFFFF
RWX, SEARCH, NOTHING = 7, 1, 0


def _ipc_of(uid: int) -> list[str]:
    """Rows of /proc/sysvipc/shm whose owner or creator is ``uid``."""
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()
    header = lines[0].split()
    rows = [dict(zip(header, line.split(), strict=False)) for line in lines[1:]]
    return [r["shmid"] for r in rows if str(uid) in (r.get("uid"), r.get("cuid"))]


def test_a_freed_uid_goes_to_a_new_conversation_only_after_its_leftovers_are_gone(
    reclaiming_homes: ReclaimingHomes, leftover_tag: str, outside_dir: Path
) -> None:
    homes, registry = reclaiming_homes(1)  # one uid: the newcomer must get the freed one
    old = homes.ensure("web:leaver")
    uid, gid = old.account.uid, old.account.gid
    kept = outside_dir / "kept"
    kept.write_text("not in a world-writable place\n")
    shared = Path(f"/tmp/{leftover_tag}-shared")
    shared.mkdir()
    os.chmod(shared, 0o1777)
    run_as(
        uid,
        gid,
        f"""
        set -e
        t={leftover_tag}
        echo notes > /tmp/$t-note
        mkdir /tmp/$t-dir && echo x > /tmp/$t-dir/inner && mkdir /tmp/$t-dir/deeper
        ln -s {kept} /tmp/$t-link
        cp /bin/sh /var/tmp/$t-sh && chmod 4755 /var/tmp/$t-sh
        echo s > /dev/shm/$t-shm
        mkfifo /tmp/$t-fifo
        mkdir {shared}/mine
        ipcmk -M 4096 >/dev/null
        """,
    )
    theirs = shared / "mine" / "theirs"  # another account's file in the leaver's directory
    theirs.write_text("root's\n")
    grouped = Path(f"/tmp/{leftover_tag}-grouped")  # root's file in the leaver's group
    grouped.write_text("grouped\n")
    os.chown(grouped, 0, gid)
    assert _ipc_of(uid)

    archive_and_reclaim(homes.root, old.name, registry)
    # the archive does not walk /tmp (minutes on a full host, under the map's lock): the
    # files wait for the uid's next holder
    assert Path(f"/tmp/{leftover_tag}-note").exists()
    # the setuid shell, run after the account is gone: a process of the old uid, writing
    # a file; the allocation kills it before the walk
    late = Path(f"/tmp/{leftover_tag}-late")
    lingering = subprocess.Popen(
        as_account(uid, gid, "/bin/sh", "-c", f"echo late > {late}; echo written; exec sleep 600"),
        stdout=subprocess.PIPE,
    )
    try:
        assert lingering.stdout is not None
        assert select.select([lingering.stdout], [], [], WAIT_S)[0], "the late file not written"
        assert lingering.stdout.readline() == b"written\n" and late.exists()
        newcomer = homes.ensure("web:newcomer")
        assert newcomer.account.uid == uid
        assert lingering.wait(timeout=WAIT_S) != 0  # killed before the uid was handed out
    finally:
        if lingering.poll() is None:
            lingering.kill()
            lingering.wait(timeout=WAIT_S)

    left = sorted(
        str(p)
        for place in ("/tmp", "/var/tmp", "/dev/shm")
        for p in Path(place).glob(f"{leftover_tag}*")
    )
    assert left == [str(grouped), str(shared)]
    assert not (shared / "mine").is_symlink()
    mine = os.lstat(shared / "mine")  # kept for the other's file, given to root
    assert (mine.st_uid, mine.st_gid) == (0, 0) and stat.S_ISDIR(mine.st_mode)
    assert theirs.read_text() == "root's\n"
    assert os.lstat(grouped).st_gid == 0
    assert kept.read_text() == "not in a world-writable place\n"  # the link was not followed
    assert _ipc_of(uid) == []
    assert leftovers.processes_of(uid, gid) == []


def _acl_letting_search(uid: int) -> bytes:
    """An ACL giving its owner everything, ``uid`` search and nobody else anything."""
    entries = [
        (ACL_USER_OBJ, RWX, ACL_UNDEFINED_ID),
        (ACL_USER, SEARCH, uid),
        (ACL_GROUP_OBJ, NOTHING, ACL_UNDEFINED_ID),
        (ACL_MASK, SEARCH, ACL_UNDEFINED_ID),
        (ACL_OTHER, NOTHING, ACL_UNDEFINED_ID),
    ]
    return struct.pack("<I", ACL_VERSION) + b"".join(struct.pack("<HHI", *e) for e in entries)


def test_the_walk_passes_over_only_roots_directories_the_uid_could_not_search(
    uid_range: tuple[int, int], leftover_tag: str
) -> None:
    """A root's private tree (a service's, a test run's) is not walked: the uid could not
    reach it. Every other directory is, even one the uid cannot search now: its owner (not
    root) or an ACL may let the uid in."""
    uid, other = uid_range[0], uid_range[0] + 1
    place = Path(f"/tmp/{leftover_tag}-place")
    place.mkdir()
    os.chmod(place, 0o1777)
    kinds = {
        "sealed": (0, 0, 0o700),  # root's, private: not entered
        "searchable": (0, 0, 0o711),
        "own-group": (0, uid, 0o710),  # root's, the uid's group may search it
        "others": (other, other, 0o700),  # another account's: it may open it up
        "acl": (0, 0, 0o700),  # root's, with an ACL letting the uid search it
    }
    for name, (owner, group, mode) in kinds.items():
        directory = place / name
        directory.mkdir()
        made = directory / "made-by-the-uid"  # before the directory was closed, say
        made.write_text("the uid's\n")
        os.chown(made, uid, uid)
        os.chown(directory, owner, group)
        os.chmod(directory, mode)
    os.setxattr(place / "acl", leftovers.ACL_XATTR, _acl_letting_search(uid))

    report = leftovers.clear_files(uid, uid, places=(place,))

    assert report.ok, report.problems()
    left = sorted(p.parent.name for p in place.glob("*/made-by-the-uid"))
    assert left == ["sealed"]
    assert report.removed == len(kinds) - 1


def test_a_freed_uid_with_a_process_left_is_passed_over_until_the_process_ends(
    reclaiming_homes: ReclaimingHomes,
) -> None:
    homes, killing = reclaiming_homes(1)
    old = homes.ensure("web:still-running")
    uid, gid = old.account.uid, old.account.gid
    archive_and_reclaim(homes.root, old.name, killing)
    # a registry that cannot kill (no killer given): the process must be found and refused
    registry = AccountRegistry(killing.layout, killing.operator_gid, killing.uid_range)
    unkilled = Homes(homes.root, isolated=True, registry=registry)
    lingering = subprocess.Popen(as_account(uid, gid, "/bin/sleep", "600"))
    try:
        with pytest.raises(UidRangeExhausted, match="holds what an archived conversation left"):
            unkilled.ensure("web:waiting")
        assert registry.usage() == (0, 1)
    finally:
        lingering.kill()
        lingering.wait(timeout=WAIT_S)
    assert unkilled.ensure("web:waiting").account.uid == uid  # tried again: free now


def test_a_restored_conversation_gets_its_uid_back_and_what_it_made_after_is_kept(
    reclaiming_homes: ReclaimingHomes, leftover_tag: str
) -> None:
    """Given back to its last holder, the uid is not walked: its files outside the home,
    made before the archiving or after it (by a process of the uid, say), are nobody
    else's and stay."""
    homes, registry = reclaiming_homes(2)
    home = homes.ensure("web:returning")
    uid, gid = home.account.uid, home.account.gid
    run_as(uid, gid, f"echo mine > /tmp/{leftover_tag}-own")
    archive_and_reclaim(homes.root, home.name, registry)
    run_as(uid, gid, f"echo later > /tmp/{leftover_tag}-later")
    back = homes.ensure("web:returning")
    assert back.account.uid == uid
    for name, text in (("own", "mine\n"), ("later", "later\n")):
        kept = Path(f"/tmp/{leftover_tag}-{name}")
        assert kept.read_text() == text and os.lstat(kept).st_uid == uid
