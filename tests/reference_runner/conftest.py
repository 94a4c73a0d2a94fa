"""The ``spawn`` fixture: start reference runners for a test, killed when it ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from reference_support import REPO, Runner, argv


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Any]:
    """``spawn(*frames, home=, env=, umask=, command=, cwd=, **argv_options)``: a started
    :class:`Runner` with ``frames`` already sent on its stdin."""
    started: list[Runner] = []

    def start(*frames: dict[str, Any] | str, home: Path | None = tmp_path, **kw: Any) -> Runner:
        env = kw.pop("env", None)
        umask = kw.pop("umask", 0o022)
        command = kw.pop("command", None)
        cwd = kw.pop("cwd", REPO)
        runner = Runner(home, argv(**kw), env=env, umask=umask, command=command, cwd=cwd)
        started.append(runner)
        for frame in frames:
            runner.send(frame)
        return runner

    yield start
    for runner in started:
        runner.kill()
