"""Review: ``log.backups = 0`` (accepted: ``ge=0``) switches the log file's size cap off.

The example config promises "at most (backups + 1) * max_bytes on disk" and the README
"the log file rotates at log.max_bytes, keeping log.backups". Python's RotatingFileHandler
never rolls over when backupCount is 0, so with ``backups = 0`` the file grows without
bound and ``max_bytes`` silently does nothing.
"""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.cli import setup_logging
from bridge.config import load_settings
from bridge.logs import stop_writer
from bridge.plugins import load_specs

SECTIONS = {k: s.settings_model for k, s in load_specs().items()}
MAX_BYTES = 4096


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    stop_writer()
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


def _on_disk(log_dir: Path) -> int:
    return sum(p.stat().st_size for p in log_dir.iterdir() if p.name.startswith("jb.log"))


@pytest.mark.parametrize("backups", [0, 1])
def test_the_log_file_stays_within_its_configured_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backups: int
) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    log_dir = tmp_path / "log"
    settings = load_settings(
        None,
        adapter_sections=SECTIONS,
        environ={
            "JAZZ_BRIDGE_LOG__FILE": str(log_dir / "jb.log"),
            "JAZZ_BRIDGE_LOG__MAX_BYTES": str(MAX_BYTES),
            "JAZZ_BRIDGE_LOG__BACKUPS": str(backups),
        },
    )
    setup_logging(settings)
    log = logging.getLogger("jazz_bridge.review")
    for i in range(400):  # ~40 KB of lines, ten times the cap
        log.info("line %04d %s", i, "x" * 60)
    for handler in logging.getLogger().handlers:
        handler.flush()
    limit = (backups + 1) * MAX_BYTES
    used = _on_disk(log_dir)
    assert used <= limit, (
        f"log.backups={backups}, log.max_bytes={MAX_BYTES}: {used} bytes of log on disk, "
        f"more than (backups + 1) * max_bytes = {limit}"
    )
