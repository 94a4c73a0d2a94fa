"""An artifact deep in its home is read holding two descriptors, not one per level.

The runner names its artifacts (an envelope may be 16 MiB: a path of millions of levels).
Reading one opened every directory on its path and kept them all open until the end: a
conversation's agent that made a tree deeper than the gateway's descriptor limit and named
a file at its bottom had the gateway (every conversation's) run out of descriptors while
it walked down, and the artifact refused with 'Too many open files'.
"""

from __future__ import annotations

import os
import resource
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.files import check_in_home, read_in_home


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    yield home
    subprocess.run(["rm", "-rf", "--", str(tmp_path)], check=False, timeout=120)


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


def test_an_artifact_deeper_than_the_descriptor_limit_is_read(home: Path) -> None:
    depth = 400
    rel = _deep(home, depth, b"the report")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = _open_fds() + 64
    assert limit < depth
    before = _open_fds()
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        check_in_home(home, rel)
        data = read_in_home(home, rel)
        absolute = read_in_home(home, str(home / rel))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert data == absolute == b"the report"
    assert _open_fds() == before
