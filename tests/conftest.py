"""Shared fixtures: throwaway operator groups and uid ranges for real-account tests (root).

With ``JB_TEST_RUNNER=released`` the session keeps only the end-to-end tests (the files
built on ``gateway_harness``'s fake runner), which then run against the fake of the
released Jazz CLI: the rest would only repeat the documented session.

Helpers tests import live in ``accounts_support`` (a ``conftest`` module cannot be imported
by name once subdirectories have conftest files of their own).
"""

from __future__ import annotations

import functools
import grp
import inspect
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from accounts_support import (
    IS_ROOT,
    OperatorGroup,
    ReclaimingHomes,
    free_uid_range,
    remove_accounts,
)

from bridge.runner.killer import kill_accounts
from provisioning.accounts import AccountRegistry
from provisioning.homes import Homes
from provisioning.layout import init_root


@pytest.fixture
def uid_range() -> tuple[int, int]:
    return free_uid_range()


@pytest.fixture
def operator_group() -> Iterator[OperatorGroup]:
    if not IS_ROOT:
        pytest.skip("needs root")
    suffix = secrets.token_hex(3)
    name, member = f"jbops{suffix}", f"jbop{suffix}"
    subprocess.run(["groupadd", name], check=True)
    subprocess.run(
        [
            "useradd",
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            "--groups",
            name,
            member,
        ],
        check=True,
    )
    try:
        yield OperatorGroup(name, grp.getgrnam(name).gr_gid, member, pwd.getpwnam(member).pw_uid)
    finally:
        subprocess.run(["userdel", member], check=False, capture_output=True)
        subprocess.run(["groupdel", name], check=False, capture_output=True)


@pytest.fixture
def shared_root(tmp_path: Path) -> Iterator[Path]:
    """A root directory whose parents let throwaway accounts traverse (like /srv)."""
    root = tmp_path / "root"
    for parent in [tmp_path, *tmp_path.parents]:
        if parent == Path("/tmp") or parent == Path("/"):
            break
        os.chmod(parent, 0o755)  # pytest makes its base 0700; accounts must traverse to root
    yield root
    remove_accounts(root / "state" / "accounts.json")


@pytest.fixture
def reclaiming_homes(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> ReclaimingHomes:
    """Isolated homes under ``shared_root`` whose accounts come from the first ``size`` uids
    of ``uid_range``, killed with the gateway's killer (as ``provision`` makes them)."""

    def make(size: int) -> tuple[Homes, AccountRegistry]:
        info = init_root(shared_root, operator_group.name)
        small = (uid_range[0], uid_range[0] + size - 1)
        registry = AccountRegistry(info.layout, info.operator_gid, small, kill=kill_accounts)
        return Homes(info, isolated=True, registry=registry), registry

    return make


WORLD_WRITABLE = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))


@pytest.fixture
def leftover_tag() -> Iterator[str]:
    """A name part for what a test leaves in /tmp, /var/tmp and /dev/shm as a conversation;
    whatever carries it is removed afterwards (a test that failed left it there)."""
    tag = f"jb-left-{secrets.token_hex(4)}"
    yield tag
    for place in WORLD_WRITABLE:
        for path in place.glob(f"{tag}*"):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


@pytest.fixture
def outside_dir() -> Iterator[Path]:
    """A directory outside every world-writable place (a link's target to be left alone)."""
    base = next(p for p in (Path("/var/lib"), Path("/opt"), Path("/srv")) if p.is_dir())
    path = Path(tempfile.mkdtemp(prefix="jb-outside-", dir=base))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fake_dir(tmp_path: Path) -> Path:
    """Where the tests' fake runner logs its runs (writable by conversation accounts)."""
    d = tmp_path / "fake"
    d.mkdir()
    os.chmod(d, 0o1777)
    for parent in [tmp_path, *tmp_path.parents]:
        if parent in (Path("/tmp"), Path("/")):
            break
        os.chmod(parent, 0o755)
    return d


@pytest.fixture
def tiny_state(env: dict[str, str]) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted over ``<root>/state`` (``env``: the module's gateway), to be
    filled so the gateway's store refuses to write (root; skipped where mount is refused)."""
    if not IS_ROOT:
        pytest.skip("needs root to mount a tmpfs over the state directory")
    state = Path(env["JAZZ_BRIDGE_ROOT"]) / "state"
    state.mkdir(parents=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0750", "jb-tiny-state", str(state)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield state
    finally:
        remove_accounts(state / "accounts.json")  # before the tmpfs (and the map) goes
        subprocess.run(["umount", "-l", str(state)], check=False)


E2E_MARKS = ("gateway_env", "install_fake_runner")


@functools.cache
def _builds_on_the_fake_runner(path: Path) -> bool:
    text = path.read_text(encoding="utf-8")
    return any(mark in text for mark in E2E_MARKS)


@functools.cache
def _fixture_builds_on_the_fake_runner(func: Any) -> bool:
    try:
        text = inspect.getsource(func)
    except (OSError, TypeError):
        return False
    return any(mark in text for mark in E2E_MARKS)


def _end_to_end(item: pytest.Item) -> bool:
    """A test of the gateway on the fake runner: its module builds on it, or a fixture it
    uses does (an ``env`` shared in a conftest)."""
    if _builds_on_the_fake_runner(item.path):
        return True
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    # the definition in use of each fixture (the last: a module's own overrides a conftest's)
    return any(_fixture_builds_on_the_fake_runner(group[-1].func) for group in defs if group)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("JB_TEST_RUNNER", "documented") != "released":
        return
    keep = [item for item in items if _end_to_end(item)]
    dropped = [item for item in items if not _end_to_end(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(autouse=True, scope="session")
def _state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every ``serve`` a test starts records the root it serves under ``$XDG_STATE_HOME``
    (bridge/cli/served.py): a directory of the session's, never /var/lib/jazz-bridge or the
    tester's own ``~/.local/state``. Subprocesses inherit it; operator_env passes it on."""
    path = tmp_path_factory.mktemp("xdg-state")
    before = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(path)
    yield path
    if before is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = before
