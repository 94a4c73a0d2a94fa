"""Filling the gateway's state directory (the ``tiny_state`` tmpfs of ``tests/conftest.py``)
until its store refuses to write: how a full disk is shown to a person."""

from __future__ import annotations

import errno
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "bridge"))
from gateway_harness import Client


def fill(directory: Path) -> Path:
    """Write a file until the filesystem is full; return it."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as fh:
        while True:
            try:
                fh.write(b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                return filler


async def refuses_writes(client: Client) -> None:
    """Until the store itself says full (SQLite may still have room in pages it holds)."""
    for i in range(60):
        async with client.session.post(
            f"{client.base}/api/threads/filler/messages", json={"user": "x", "text": f"f{i}"}
        ) as resp:
            if resp.status == 507:
                return
    raise AssertionError("the store never refused a write on a full disk")
