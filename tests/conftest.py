"""Shared fixtures: throwaway operator groups and uid ranges for real-account tests (root)."""

from __future__ import annotations

import grp
import os
import pwd
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root (real accounts and groups)")


@dataclass(frozen=True)
class OperatorGroup:
    name: str
    gid: int
    member: str  # a throwaway human operator account in the group
    member_uid: int


def _free_range(span: int = 200) -> tuple[int, int]:
    """A uid range nothing on this host uses (tests must never take over real accounts)."""
    for _ in range(100):
        lo = 71000 + secrets.randbelow(80) * 100
        if all(_uid_free(u) for u in range(lo, lo + span)):
            return lo, lo + span - 1
    raise RuntimeError("no free uid range for tests")


def _uid_free(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return False
    except KeyError:
        pass
    try:
        grp.getgrgid(uid)
        return False
    except KeyError:
        return True


@pytest.fixture
def uid_range() -> tuple[int, int]:
    return _free_range()


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


def remove_accounts(map_path: Path) -> None:
    """Delete every account a test's uid map recorded (throwaway accounts)."""
    import json

    try:
        data = json.loads(map_path.read_text())
    except (OSError, ValueError):
        return
    for entry in data.get("accounts", {}).values():
        name = entry.get("name")
        if isinstance(name, str) and name.startswith("jb-"):
            subprocess.run(["userdel", name], check=False, capture_output=True)
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
