"""The gateway's log file (``log.file``) after someone else moved or removed it.

logrotate (its default: rename, then a new file), an operator freeing disk space with
``rm``, or a one-shot ``jazz-bridge`` command rotating the shared file by size: the running
``serve`` kept writing into the file it had open (renamed away, or deleted and still
filling the disk unseen), and nothing appeared at ``log.file`` any more. Now the file is
made again at its path and the lines go on there.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import remove_accounts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))

from faults_support import gateway_env, serve, wait_until


@pytest.fixture
def env(tmp_path: Path, fake_dir: Path, uid_range: tuple[int, int]) -> Iterator[dict[str, str]]:
    e = gateway_env(tmp_path / "root", fake_dir, uid_range)
    e["JAZZ_BRIDGE_LOG__FILE"] = str(tmp_path / "log" / "jb.log")
    yield e
    remove_accounts(tmp_path / "root" / "state" / "accounts.json")


def _messages(path: Path) -> list[str]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line)["msg"] for line in lines if line.strip()]


@pytest.mark.parametrize("how", ["moved", "removed"])
async def test_a_log_file_moved_or_removed_is_made_again(
    env: dict[str, str], tmp_path: Path, how: str
) -> None:
    log_file = Path(env["JAZZ_BRIDGE_LOG__FILE"])
    async with serve(env, tmp_path) as (_, client):
        await wait_until(
            lambda: any("listening" in m for m in _messages(log_file)), 10, "the first lines"
        )
        if how == "moved":
            log_file.rename(log_file.with_name("jb.log.1"))  # what logrotate does
        else:
            log_file.unlink()
        await client.post("r", "after the rotation")
        await client.wait_role("r", "assistant")
        try:
            await wait_until(
                lambda: any(m.startswith("turn web:r") for m in _messages(log_file)),
                10,
                "the turn's line in the log file",
            )
        except AssertionError:
            found = sorted(p.name for p in log_file.parent.iterdir())
            raise AssertionError(
                f"log file {how}: nothing was written to {log_file} since (the log "
                f"directory holds {found})"
            ) from None
