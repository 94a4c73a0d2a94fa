"""Finding and killing every process of one run, including ones that left its group.

``killpg`` misses a grandchild that called ``setsid``. Every run is therefore tagged with
an environment variable only it carries (``JAZZ_RUN_TAG``), and, when isolated, runs under
a uid that belongs to its conversation alone (one run at a time per conversation), so
"everything of this run" is exact: the process group, every process carrying the tag, and
every process of the conversation's uid.

A scan of ``/proc`` cannot see a fork chain, though (a process that forks and exits in a
loop: the pid a scan lists is gone by the time it is read), so every sweep of an isolated
run starts by killing the account's processes all at once (:mod:`.killer`).

A scan of ``/proc`` costs milliseconds of CPU. After a run ends normally, its sweep is not
urgent (it must be done before the conversation's next run), so :class:`Sweeps` serves every
run waiting to be swept with one scan, at most one scan per ``min_interval_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass

from .killer import AccountKillError, kill_accounts

log = logging.getLogger(__name__)

RUN_TAG_ENV = "JAZZ_RUN_TAG"


def _proc_pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _read(path: str, limit: int = 1 << 20) -> bytes | None:
    """A small /proc file whole (os-level calls: this runs for every process, every sweep)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks = []
        size = 0
        while size < limit:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _status(pid: int) -> tuple[int, bool] | None:
    """(real uid, is a zombie) of a live pid, None when it is gone."""
    data = _read(f"/proc/{pid}/status")
    if not data:
        return None
    try:
        at = data.index(b"\nUid:") + 5
        uid = int(data[at : data.index(b"\t", at + 1)].strip())
    except ValueError:
        return None
    return uid, b"\nState:\tZ" in data


def _tags(pid: int) -> set[bytes]:
    data = _read(f"/proc/{pid}/environ")
    if not data:
        return set()
    return {item for item in data.split(b"\0") if item.startswith(RUN_TAG_ENV.encode() + b"=")}


@dataclass(frozen=True)
class Target:
    """One run to sweep: its tag, its account (isolated; never root) and process group."""

    tag: str | None
    uid: int | None
    pgid: int | None

    @property
    def needle(self) -> bytes | None:
        return f"{RUN_TAG_ENV}={self.tag}".encode() if self.tag else None


def scan(targets: list[Target]) -> list[list[int]]:
    """Live processes of each target (one pass over /proc for all of them).

    An isolated run's processes are those of its account's uid: a process cannot leave
    its real uid without privilege, and reading every process's environment for the tag
    would double the scan's cost. A run of the gateway's own account is found by its tag.
    """
    me = os.getpid()
    by_uid: dict[int, list[int]] = {}
    by_tag: dict[bytes, list[int]] = {}
    for i, t in enumerate(targets):
        if t.uid is not None:  # the account's uid names all it runs: no tag to read
            by_uid.setdefault(t.uid, []).append(i)
        elif t.needle is not None:
            by_tag.setdefault(t.needle, []).append(i)
    found: list[list[int]] = [[] for _ in targets]
    for pid in _proc_pids():
        if pid == me:
            continue
        status = _status(pid)
        if status is None or status[1]:
            continue  # gone, or a zombie (nothing left to kill)
        hits = set(by_uid.get(status[0], ()))
        if by_tag:  # only runs without an account of their own are found by their tag
            for needle in _tags(pid):
                hits.update(by_tag.get(needle, ()))
        for i in hits:
            found[i].append(pid)
    return found


def run_processes(tag: str | None, uid: int | None) -> list[int]:
    """Live processes of one run: tagged, or (isolated) of the conversation's uid."""
    return scan([Target(tag, uid, None)])[0]


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def kill_all(
    tag: str | None, uid: int | None, pgid: int | None, deadline_s: float = 3.0
) -> list[int]:
    """SIGKILL the run's group and every process of the run until none is left (bounded).

    Returns the pids that were still alive at the deadline (normally none).
    """
    return kill_many([Target(tag, uid, pgid)], deadline_s)[0]


def kill_many(targets: list[Target], deadline_s: float = 3.0) -> list[list[int]]:
    """:func:`kill_all` for several runs at once: one /proc scan per round for all.

    An isolated run's account is first killed whole (:mod:`.killer`); the scans then
    wait for those processes to be gone and find the rest (its group, its tag).
    """
    targets = [Target(t.tag, None if t.uid == 0 else t.uid, t.pgid) for t in targets]
    uids = {t.uid for t in targets if t.uid is not None}
    if uids:
        try:
            kill_accounts(uids)
        except AccountKillError as exc:  # the scans below still find all but a fork chain
            log.error("%s", exc)
    end = time.monotonic() + deadline_s
    while True:
        for t in targets:
            if t.pgid is not None:
                signal_group(t.pgid, signal.SIGKILL)
        found = scan(targets)
        pids = {pid for group in found for pid in group}
        if not pids:
            return found
        # each one's process group too: a process that forks and exits in a loop is gone
        # before its pid is signalled, while its group (kept by every generation) is not
        ours = os.getpgid(0)
        for pgid in {_pgid(pid) for pid in pids} - {None, ours}:
            assert pgid is not None
            signal_group(pgid, signal.SIGKILL)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() >= end:
            return scan(targets)
        time.sleep(0.01)  # poll interval while the kernel tears processes down (bounded)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


class Sweeps:
    """Sweeps of finished runs, coalesced: one /proc scan serves every run waiting.

    ``sweep`` returns the pids that survived (normally none) once the run's processes are
    gone. A scan starts at once when none ran in the last ``min_interval_s``, else at the
    end of that interval with every request that arrived meanwhile. ``close`` waits for
    the scan in progress.
    """

    def __init__(self, min_interval_s: float = 0.05) -> None:
        self.min_interval_s = min_interval_s
        self._waiting: list[tuple[Target, asyncio.Future[list[int]]]] = []
        self._task: asyncio.Task[None] | None = None
        self._last = 0.0
        self.scans = 0  # sweeps made (each served every run waiting at its start)

    async def sweep(self, tag: str | None, uid: int | None, pgid: int | None) -> list[int]:
        future: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._waiting.append((Target(tag, uid, pgid), future))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain(), name="run-sweeps")
        return await asyncio.shield(future)

    async def _drain(self) -> None:
        while self._waiting:
            pause = self._last + self.min_interval_s - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)  # rate limit: requests gather meanwhile
            batch, self._waiting = self._waiting, []
            self._last = time.monotonic()
            self.scans += 1
            try:
                left = await asyncio.to_thread(kill_many, [t for t, _ in batch])
            except Exception as exc:  # handed to every waiter
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), pids in zip(batch, left, strict=True):
                if not future.done():
                    future.set_result(pids)

    async def close(self) -> None:
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
