"""Finding and killing every process of one run, including ones that left its group.

``killpg`` misses a grandchild that called ``setsid``. Every run is therefore tagged with
an environment variable only it carries (``JAZZ_RUN_TAG``), and, when isolated, runs under
a uid that belongs to its conversation alone (one run at a time per conversation), so
"everything of this run" is exact: the process group, every process carrying the tag, and
every process of the conversation's uid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

RUN_TAG_ENV = "JAZZ_RUN_TAG"


def _proc_pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _real_uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        return data[data.rindex(b")") + 2 : data.rindex(b")") + 3] == b"Z"
    except (OSError, ValueError):
        return True


def _has_tag(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return needle in fh.read().split(b"\0")
    except OSError:
        return False


def run_processes(tag: str | None, uid: int | None) -> list[int]:
    """Live processes of one run: tagged, or (isolated) of the conversation's uid."""
    me = os.getpid()
    needle = f"{RUN_TAG_ENV}={tag}".encode() if tag else None
    found = []
    for pid in _proc_pids():
        if pid == me:
            continue
        mine = (uid is not None and _real_uid(pid) == uid) or (
            needle is not None and _has_tag(pid, needle)
        )
        if mine and not _is_zombie(pid):
            found.append(pid)
    return found


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def kill_all(
    tag: str | None, uid: int | None, pgid: int | None, deadline_s: float = 3.0
) -> list[int]:
    """SIGKILL the run's group and every process of the run until none is left (bounded).

    Returns the pids that were still alive at the deadline (normally none).
    """
    if uid is not None and uid == 0:
        uid = None  # never sweep root's processes
    end = time.monotonic() + deadline_s
    while True:
        if pgid is not None:
            signal_group(pgid, signal.SIGKILL)
        pids = run_processes(tag, uid)
        if not pids:
            return []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() >= end:
            return run_processes(tag, uid)
        time.sleep(0.01)  # poll interval while the kernel tears processes down (bounded)
