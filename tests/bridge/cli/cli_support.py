"""Set-up the operator CLI's tests share: a conversation in a root's store as the gateway
records one, and a Python another account can run this checkout with.

Its own module, not the conftest: the conftest is imported under that one name, so tests
import helpers from here (this directory is on the path of its test modules).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from bridge.model import Inbound, InboxState
from bridge.store import SqliteStore
from provisioning import naming

REPO = Path(__file__).resolve().parents[3]
NOBODY = 65534  # in no operator group
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]


def add_conversation(root: Path, key: str, platform: str, *, state: str = "accepted") -> None:
    """A conversation in the root's store, as the gateway records one: its one message
    ``accepted`` (no run yet), ``running`` (its run started, not finished) or ``done``
    (answered: the conversation is idle)."""

    async def go() -> None:
        store = SqliteStore(root / "state" / "bridge.db")
        await store.open()
        try:
            record, _new = await store.accept(
                Inbound(platform=platform, event_id="e1", thread_key=key, sender_id="u", text="x"),
                home=naming.home_name(key),
                is_command=False,
            )
            if state == "running":
                assert await store.begin_run(record.id, "u") is not None
            elif state == "done":
                await store.complete_message(record.id, InboxState.DONE, [])
        finally:
            await store.close()

    asyncio.run(go())


def run_as(
    switch: list[str], argv: list[str], env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*switch, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def interpreter(switch: list[str], cwd: Path, who: str) -> tuple[list[str], dict[str, str]]:
    """A Python the account ``switch`` runs as can run with this checkout importable: the
    test's own when others may execute it, else the system's of the same version with our
    site-packages (the venv's interpreter may live under /root)."""
    site = sysconfig.get_paths()["purelib"]
    for argv, extra in (
        ([sys.executable], {"PYTHONPATH": str(REPO)}),
        (["/usr/bin/python3"], {"PYTHONPATH": f"{REPO}:{site}"}),
    ):
        probe = run_as(
            switch, [*argv, "-c", "import bridge.cli"], {"PATH": "/usr/bin:/bin", **extra}, cwd
        )
        if probe.returncode == 0:
            return argv, extra
    pytest.skip(f"no Python usable by {who} here")


def reachable_by_others(path: Path) -> None:
    """Let other accounts traverse to ``path`` (pytest makes its base 0700), as an admin's
    /srv is."""
    for parent in [path, *path.parents]:
        if parent in (Path("/tmp"), Path("/")):
            break
        os.chmod(parent, 0o755)
