"""Review: a log file on a full disk buried the gateway's stderr under tracebacks.

With ``log.file`` on a disk that fills, every log line the gateway wrote failed on the file
and Python's logging printed ``--- Logging error ---``, a traceback, the call stack and the
line again to stderr (the journal): some 25 lines of noise per log line, for as long as
the disk stayed full, around the real lines the stderr handler printed. The operator now
reads one warning naming the file and why, and one line when it is written again; the
lines in between still reach stderr, and the file takes lines again once space is freed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import IS_ROOT

REPO = Path(__file__).resolve().parents[2]
LINES = 60

SCRIPT = r"""
import logging, os, sys
from bridge.cli import setup_logging
from bridge.config import load_settings
from bridge.plugins import load_specs

logs_dir = sys.argv[1]
sections = {k: s.settings_model for k, s in load_specs().items()}
env = {"JAZZ_BRIDGE_LOG__FILE": os.path.join(logs_dir, "gateway.log"),
       "JAZZ_BRIDGE_LOG__FORMAT": "json"}
# written in place (as one-shot commands do; serve's writer thread runs the same handlers):
# each line is on the disk, or failed, before the next statement
setup_logging(load_settings(None, adapter_sections=sections, environ=env))
log = logging.getLogger("jazz_bridge.review4")
log.info("before the disk fills")
filler = os.path.join(logs_dir, "filler")
fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
try:
    while os.write(fd, b"x" * 512):
        pass
except OSError:
    pass
os.close(fd)
for i in range(int(sys.argv[2])):
    log.info("while full %d %s", i, "y" * 200)
os.remove(filler)
log.info("space is back")
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if not IS_ROOT:
        pytest.skip("mounting a small file system needs root")
    logs_dir = tmp_path / "logs"
    logs_dir.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "jazz-review4-logs", str(logs_dir)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield logs_dir
    finally:
        subprocess.run(["umount", "-l", str(logs_dir)], check=False, timeout=30)


def test_a_full_log_disk_is_said_once_not_per_line(small_disk: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(small_disk), str(LINES)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    records = []
    other = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            other.append(line)
    msgs = [r.get("msg", "") for r in records]
    assert sum(m.startswith("while full") for m in msgs) == LINES  # stderr kept every line
    assert len(other) <= 4, (
        f"{len(other)} lines of noise on stderr for {LINES} log lines while the log file's "
        "disk was full:\n" + "\n".join(other[:40])
    )
    assert any("gateway.log" in line and "No space left" in line for line in other), other
    log_file = (small_disk / "gateway.log").read_text(encoding="utf-8", errors="replace")
    assert "space is back" in log_file
    assert "before the disk fills" in log_file
    # the file's lines stay whole JSON lines: a torn one is not glued to the next
    last = log_file.splitlines()[-1]
    assert json.loads(last)["msg"] == "space is back", last
