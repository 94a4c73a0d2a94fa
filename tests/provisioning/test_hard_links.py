"""A hard link in a home to a file the conversation cannot read is never read for it.

Where ``fs.protected_hardlinks`` is 0, link(2) needs no access to a file, only a path to it:
a run could link the gateway's config (its tokens) or /etc/shadow into its home and report
it as an artifact, which the gateway (root) read and sent to the chat, and which archiving
packed into the operators' tarball. As in tests/faults/test_hostile_runner.py, the link is
planted here as root to stand for that, since this machine has the protection on.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from accounts_support import OperatorGroup, needs_root

from bridge.files import check_in_home, read_in_home
from provisioning.accounts import AccountRegistry
from provisioning.archive import archive_home, restore_home, tarball_path
from provisioning.errors import UnsafePathError
from provisioning.homes import Homes
from provisioning.layout import init_root

TOKEN = "xoxb-REVIEW-SECRET-TOKEN"


def _as(uid: int, gid: int, *argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["setpriv", "--reuid", str(uid), "--regid", str(gid), "--clear-groups", "--", *argv],
        capture_output=True,
        timeout=30,
    )


@needs_root
def test_an_artifact_that_is_a_hard_link_to_a_file_the_conversation_cannot_read_is_refused(
    tmp_path: Path,
    shared_root: Path,
    operator_group: OperatorGroup,
    uid_range: tuple[int, int],
) -> None:
    info = init_root(shared_root, operator_group.name)
    homes = Homes(
        info, isolated=True, registry=AccountRegistry(info.layout, info.operator_gid, uid_range)
    )
    a = homes.ensure("web:review-artifact-a")
    # the gateway's config, root's and 0600, on the same filesystem and reachable by path
    config = tmp_path / "jazz-bridge.toml"
    config.write_text(f'[slack]\nbot_token = "{TOKEN}"\n')
    os.chmod(config, 0o600)
    assert _as(a.account.uid, a.account.gid, "cat", str(config)).returncode != 0
    # what A's run does on a kernel without protected_hardlinks (ln needs no read access)
    planted = a.path / "workspace" / "report.txt"
    os.link(config, planted)
    assert _as(a.account.uid, a.account.gid, "cat", str(planted)).returncode != 0  # still not A's
    # A's run then reports workspace/report.txt as an artifact: turns._record checks it,
    # delivery._send reads it (as root) and uploads the bytes to A's chat
    leaked: bytes | None = None
    with pytest.raises(UnsafePathError):
        check_in_home(a.path, str(planted))
        leaked = read_in_home(a.path, str(planted))
    assert leaked is None or TOKEN.encode() not in leaked


@needs_root
def test_a_hard_link_to_a_root_only_file_is_not_packed_into_the_operator_readable_archive(
    tmp_path: Path,
    shared_root: Path,
    operator_group: OperatorGroup,
    uid_range: tuple[int, int],
) -> None:
    """Same root cause: archiving reads the linked file as root into a tarball that the
    operator group reads (0640 gateway:O); the file itself was readable by root only."""
    info = init_root(shared_root, operator_group.name)
    homes = Homes(
        info, isolated=True, registry=AccountRegistry(info.layout, info.operator_gid, uid_range)
    )
    a = homes.ensure("web:review-archive-a")
    config = tmp_path / "jazz-bridge.toml"
    config.write_text(f'[slack]\nbot_token = "{TOKEN}"\n')
    os.chmod(config, 0o600)
    os.link(config, a.path / "workspace" / "report.txt")  # as on a kernel without protection
    archive_home(info, a.name)
    try:
        tarball = tarball_path(info.layout, a.name)
        with tarfile.open(tarball, "r:gz") as tar:
            names = {m.name: m for m in tar.getmembers()}
            member = names.get(f"{a.name}/workspace/report.txt")
            source = tar.extractfile(member) if member is not None else None
            packed = source.read() if source is not None else b""
        # the operator (a human in O, not root) can read the tarball, so the token leaks
        op = operator_group
        readable = (
            subprocess.run(
                [
                    "setpriv",
                    "--reuid",
                    str(op.member_uid),
                    "--regid",
                    str(op.gid),
                    "--init-groups",
                    "--",
                    "cat",
                    str(tarball),
                ],
                capture_output=True,
                timeout=30,
            ).returncode
            == 0
        )
        assert not (readable and TOKEN.encode() in packed), (
            "a root-only file hard-linked into a home was packed into the operator-readable archive"
        )
    finally:
        restore_home(info, a.name)
