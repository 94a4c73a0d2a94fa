"""Review: the idle-home sweep goes on past a home it cannot archive.

The archive disk fills up exactly when archiving is needed: the oldest idle home (a big
one, tried first) fails with "No space left on device". That home stays (its tarball is
removed, its directory untouched); the sweep must go on to the other idle homes (a small
one fits), say which home failed and why, and not end the whole pass with an OSError
(which it did, every pass, so no idle home was ever archived again).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import IS_ROOT, remove_accounts
from gateway_harness import gateway_env, running_gateway

from bridge.config import RetentionSettings
from bridge.operators import Operators
from bridge.retention import Sweeper
from provisioning import naming
from provisioning.archive import is_archived

ARCHIVE_DISK = "256k"  # a tmpfs mounted on <root>/archive: the small home fits, the big not
BIG_FILE_BYTES = 2 * 1024 * 1024  # random, so gzip cannot shrink it below the disk


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


@pytest.fixture
def small_archive_disk(env: dict[str, str]) -> Iterator[Path]:
    if not IS_ROOT:
        pytest.skip("mounting a small file system needs root")
    archive = Path(env["JAZZ_BRIDGE_ROOT"]) / "archive"
    archive.mkdir(parents=True, exist_ok=True)
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


async def test_a_home_that_does_not_fit_leaves_the_others_archived(
    env: dict[str, str], small_archive_disk: Path
) -> None:
    async with running_gateway(env) as (app, client):
        for thread in ("big", "small"):  # "big" is the older: the sweep tries it first
            await client.post(thread, "hello")
            await client.wait_role(thread, "assistant")
        assert app.store is not None and app.provisioned is not None
        root = app.provisioned.root
        big, small = (naming.home_name(f"web:{t}") for t in ("big", "small"))
        filler = root.layout.home(big) / "workspace" / "big.bin"
        filler.write_bytes(os.urandom(BIG_FILE_BYTES))
        ops = Operators(app.store, root.layout, app.provisioned.isolated)
        sweeper = Sweeper(RetentionSettings(archive_idle_days=1e-9), app.store, ops, root)

        try:
            report = await sweeper.sweep()
        except OSError as exc:
            pytest.fail(f"the sweep ended at the home that did not fit: {exc!r}")

        rows = {row["home"]: row for row in report["archived"]}
        assert rows[big]["archived"] is False
        assert "No space left on device" in rows[big]["reason"], rows[big]
        assert root.layout.home(big).is_dir() and filler.stat().st_size == BIG_FILE_BYTES
        assert rows[small]["archived"] is True, rows[small]
        assert is_archived(root.layout, small)
        assert sorted(p.name for p in small_archive_disk.iterdir()) == [f"{small}.tar.gz"]
