"""Review: ``homes list`` says how much disk a home takes, as ``du`` would.

A file with several names in a home (``git clone`` of a local repository hard-links its
objects, so do ``cp -al`` and package stores) takes its blocks once; the listing counted
them once per name, so a home holding one 1 MiB file under ten names was listed at 10 MiB,
and the operator choosing which homes to clean up or archive chose wrong.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts
from gateway_harness import gateway_env, running_gateway

from provisioning import naming

LINKS = 9
FILE_BYTES = 1024 * 1024


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    yield gateway_env(tmp_path / "root", fake_dir, uid_range)
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def _du(path: Path) -> int:
    out = subprocess.run(
        ["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[0])


async def test_a_file_with_several_names_is_counted_once(env: dict[str, str]) -> None:
    async with running_gateway(env) as (_app, client):
        await client.post("links", "hello")
        await client.wait_role("links", "assistant")
    home = Path(env["JAZZ_BRIDGE_ROOT"]) / "chats" / naming.home_name("web:links")
    repo = home / "workspace" / "clone"
    repo.mkdir()
    (repo / "pack").write_bytes(os.urandom(FILE_BYTES))
    for n in range(LINKS):
        os.link(repo / "pack", repo / f"pack-{n}")

    listed = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "homes", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["sizeBytes"] == _du(home), (row["sizeBytes"], _du(home))
