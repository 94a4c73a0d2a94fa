"""``jazz-bridge homes archive KEY`` when the archive's disk is full.

The operator saw ``jazz-bridge: error: [Errno 28] No space left on device`` and nothing
else: not which disk (the archive's, the homes', the state's), not which file, not whether
the home was still there. The line now names the tarball it could not write and says the
home is left as it is; the home is whole and no half tarball is left behind.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import IS_ROOT

from bridge.model import Inbound
from bridge.store import SqliteStore
from bridge.store.base import InboxState
from provisioning import naming
from provisioning.archive import tarball_path
from provisioning.layout import Layout

REPO = Path(__file__).resolve().parents[2]
KEY = "web:fills-the-disk"
ARCHIVE_DISK = "256k"
BIG_FILE_BYTES = 2 * 1024 * 1024  # random: gzip cannot shrink it below the disk


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(REPO),
            "JAZZ_BRIDGE_ISOLATION": "off",
            "JAZZ_BRIDGE_ROOT": str(cwd / "root"),
            "JAZZ_BRIDGE_LOG__FORMAT": "text",
        },
    )


def answered_conversation(root: Path, key: str) -> None:
    """A conversation in the root's store whose one message was answered (idle)."""

    async def go() -> None:
        store = SqliteStore(root / "state" / "bridge.db")
        await store.open()
        try:
            message, _ = await store.accept(
                Inbound(platform="web", event_id="e1", thread_key=key, sender_id="u", text="x"),
                home=naming.home_name(key),
                is_command=False,
            )
            await store.complete_message(message.id, InboxState.DONE, [])
        finally:
            await store.close()

    asyncio.run(go())


@pytest.fixture
def small_archive_disk(tmp_path: Path) -> Iterator[Path]:
    if not IS_ROOT:
        pytest.skip("mounting a small file system needs root")
    archive = tmp_path / "root" / "archive"
    archive.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={ARCHIVE_DISK}", "tmpfs", str(archive)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield archive
    finally:
        subprocess.run(["umount", "-l", str(archive)], check=False, timeout=30)


def test_a_full_archive_disk_is_named(tmp_path: Path, small_archive_disk: Path) -> None:
    made = cli(tmp_path, "homes", "ensure", KEY)
    assert made.returncode == 0, made.stderr
    home = Path(made.stdout.strip())
    answered_conversation(tmp_path / "root", KEY)
    big = home / "workspace" / "big.bin"
    big.write_bytes(os.urandom(BIG_FILE_BYTES))

    done = cli(tmp_path, "homes", "archive", KEY)

    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    target = tarball_path(Layout(tmp_path / "root"), naming.home_name(KEY))
    assert "No space left on device" in line
    assert str(target) in line, line  # which file, so which disk
    assert "the home is left as it is" in line, line
    assert big.stat().st_size == BIG_FILE_BYTES
    assert os.listdir(small_archive_disk) == []  # no half tarball
