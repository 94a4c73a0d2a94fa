"""Artifacts read out of a home (``bridge/files.py``'s ``check_in_home`` and ``read_in_home``,
through ``provisioning.pinned``): only a regular file of the conversation's own, inside its
home however it is named, read in bounded descriptors however deep it lies.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest
from accounts_support import OperatorGroup, needs_root
from home_support import CONFIG_TOKEN, as_uid, open_fds

from bridge.files import check_in_home, read_in_home
from provisioning.accounts import AccountRegistry
from provisioning.errors import UnsafePathError
from provisioning.homes import Homes
from provisioning.layout import init_root


@needs_root
def test_an_artifact_that_is_a_hard_link_to_a_file_the_conversation_cannot_read_is_refused(
    tmp_path: Path,
    shared_root: Path,
    operator_group: OperatorGroup,
    uid_range: tuple[int, int],
) -> None:
    """Where ``fs.protected_hardlinks`` is 0, link(2) needs no access to a file, only a path
    to it: a run could link the gateway's config (its tokens) or /etc/shadow into its home
    and report it as an artifact, which the gateway (root) read and sent to the chat. As in
    tests/faults/test_hostile_runner.py, the link is planted here as root to stand for
    that, since this machine has the protection on."""
    info = init_root(shared_root, operator_group.name)
    homes = Homes(
        info, isolated=True, registry=AccountRegistry(info.layout, info.operator_gid, uid_range)
    )
    a = homes.ensure("web:linked-artifact-a")
    # the gateway's config, root's and 0600, on the same filesystem and reachable by path
    config = tmp_path / "jazz-bridge.toml"
    config.write_text(f'[slack]\nbot_token = "{CONFIG_TOKEN}"\n')
    os.chmod(config, 0o600)
    assert as_uid(a.account.uid, a.account.gid, "cat", str(config)).returncode != 0
    # what A's run does on a kernel without protected_hardlinks (ln needs no read access)
    planted = a.path / "workspace" / "report.txt"
    os.link(config, planted)
    # still not A's to read
    assert as_uid(a.account.uid, a.account.gid, "cat", str(planted)).returncode != 0
    # A's run then reports workspace/report.txt as an artifact: turns._record checks it,
    # delivery._send reads it (as root) and uploads the bytes to A's chat
    leaked: bytes | None = None
    with pytest.raises(UnsafePathError):
        check_in_home(a.path, str(planted))
        leaked = read_in_home(a.path, str(planted))
    assert leaked is None or CONFIG_TOKEN.encode() not in leaked


def test_names_starting_with_two_dots_are_in_the_home(tmp_path: Path) -> None:
    """The check for "outside the home" looked at whether the path relative to the home
    began with "..": a file the agent named ``..notes.txt`` (or one in a directory
    ``..cache``) was refused as 'outside the conversation's home' though it lies in it; a
    real ``..`` step out is still refused."""
    home = tmp_path / "home"
    (home / "..cache").mkdir(parents=True)
    (home / "..notes.txt").write_bytes(b"notes")
    (home / "..cache" / "plot.png").write_bytes(b"png")
    (tmp_path / "outside.txt").write_bytes(b"secret")
    for path, data in (
        ("..notes.txt", b"notes"),
        (str(home / "..notes.txt"), b"notes"),
        ("..cache/plot.png", b"png"),
        ("./..cache/../..notes.txt", b"notes"),
    ):
        check_in_home(home, path)
        assert read_in_home(home, path) == data
    for outside in ("../outside.txt", str(tmp_path / "outside.txt"), "..", "../home/../x"):
        with pytest.raises(UnsafePathError):
            read_in_home(home, outside)


def _deep(home: Path, depth: int, data: bytes) -> str:
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        out = os.open("report.txt", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd)
        os.write(out, data)
        os.close(out)
    finally:
        os.close(fd)
    return "/".join(["d"] * depth + ["report.txt"])


def test_an_artifact_deeper_than_the_descriptor_limit_is_read(
    tmp_path: Path, deep_cleanup: None
) -> None:
    """The runner names its artifacts (an envelope may be 16 MiB: a path of millions of
    levels). Reading one opened every directory on its path and kept them all open until
    the end: a conversation's agent that made a tree deeper than the gateway's descriptor
    limit and named a file at its bottom had the gateway (every conversation's) run out of
    descriptors while it walked down, and the artifact refused with 'Too many open files'.
    It is read holding two descriptors, not one per level."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    depth = 400
    rel = _deep(home, depth, b"the report")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = open_fds() + 64
    assert limit < depth
    before = open_fds()
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        check_in_home(home, rel)
        data = read_in_home(home, rel)
        absolute = read_in_home(home, str(home / rel))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert data == absolute == b"the report"
    assert open_fds() == before
