"""A root first served as root with ``isolation = "off"`` (README: "To try it without
touching the system's accounts ... JAZZ_BRIDGE_ISOLATION=off ./scripts/serve.sh"), then
served normally (isolated). Each existing conversation gets an account and its home is
chowned to it, but everything inside stays the gateway's (root's, 0600/0700): the
conversation's own account can no longer read its transcript or its config.json.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from accounts_support import OperatorGroup, needs_root

from provisioning.accounts import AccountRegistry
from provisioning.homes import Homes
from provisioning.layout import init_root

KEY = "slack:T0TRY:C0TRY:1764669600.000100"


def _readable_by(uid: int, gid: int, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", "cat", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )


@needs_root
def test_a_home_made_single_account_is_usable_by_its_account_once_isolated(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    info = init_root(shared_root, operator_group.name)
    trial = Homes(info, isolated=False).ensure(KEY)
    transcript = trial.path / "history" / "conversation.json"
    fd = os.open(transcript, os.O_WRONLY | os.O_CREAT, 0o600)  # as a run (uid 0, umask 077)
    os.write(fd, b'{"messages": []}\n')
    os.close(fd)

    registry = AccountRegistry(info.layout, info.operator_gid, uid_range)
    home = Homes(info, isolated=True, registry=registry).ensure(KEY)
    uid, gid = home.account.uid, home.account.gid
    assert os.lstat(home.path).st_uid == uid  # the home itself was handed over

    for path in (transcript, home.path / "config.json"):
        done = _readable_by(uid, gid, path)
        st = os.lstat(path)
        assert done.returncode == 0, (
            f"{path} is {st.st_uid}:{st.st_gid} {st.st_mode & 0o7777:04o}: the conversation's "
            f"account (uid {uid}) cannot read it: {done.stderr.strip()}"
        )
