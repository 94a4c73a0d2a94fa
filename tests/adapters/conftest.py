"""Fixtures the adapters' test directories share: a state directory on a small tmpfs, to be
filled (``full_disk_support``) so the gateway's store refuses to write (root only)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import IS_ROOT, remove_accounts


@pytest.fixture
def tiny_state(env: dict[str, str]) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted over ``<root>/state`` (``env``: the module's gateway)."""
    if not IS_ROOT:
        pytest.skip("needs root to mount a tmpfs over the state directory")
    state = Path(env["JAZZ_BRIDGE_ROOT"]) / "state"
    state.mkdir(parents=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0750", "jb-review4-state", str(state)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield state
    finally:
        remove_accounts(state / "accounts.json")
        subprocess.run(["umount", "-l", str(state)], check=False)
