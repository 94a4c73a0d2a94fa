"""Killing every process of a conversation's account at once, fork chains included.

A ``/proc`` scan cannot see everything: a process that forks and exits in a loop (a fork
chain) lives microseconds per generation, so the pid a scan lists is gone by the time it
is read, and the chain escapes every scan and every group kill aimed at a pid it saw.
``kill(-1, SIGKILL)`` made *as the account* cannot be outrun: it signals every process
the caller may signal (for a caller without privileges: exactly those whose real or saved
uid is its own), and the kernel walks the task list under the lock ``fork`` needs to add
a process.

The calls are made by one small root helper process (:class:`AccountKiller`, started on
first use and kept): a uid switch is per process, never to be made in the gateway's own
threads. Per account it becomes the uid with root kept as the saved uid, calls
``kill(-1, SIGKILL)`` and becomes root again: three system calls, no process started per
sweep. Any failure ends the helper (it never goes on half switched); the next request
starts a new one.
"""

from __future__ import annotations

import logging
import select
import subprocess
import sys
import threading
from collections.abc import Iterable

log = logging.getLogger(__name__)

HELPER_PROGRAM = """
import os, signal, sys
for line in sys.stdin:
    try:
        for word in line.split():
            uid = int(word)
            if uid <= 0:
                raise ValueError("refusing uid %d" % uid)
            os.setresuid(uid, uid, 0)  # root stays the saved uid: the way back
            try:
                os.kill(-1, signal.SIGKILL)  # never this helper itself
            except ProcessLookupError:
                pass
            os.setresuid(0, 0, 0)
    except BaseException as exc:
        sys.stdout.write("error %s\\n" % (exc,))
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.write("ok\\n")
    sys.stdout.flush()
"""
REPLY_TIMEOUT_S = 30.0  # three system calls per account; bounded all the same


class AccountKillError(OSError):
    """The processes of an account could not be killed (the message says why)."""


class AccountKiller:
    """The root helper that kills accounts' processes; thread-safe, restarted when gone."""

    def __init__(self, python: str | None = None) -> None:
        self._python = python or sys.executable
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def kill(self, uids: Iterable[int]) -> None:
        """SIGKILL every process of each account in ``uids`` (root is refused)."""
        wanted = sorted(set(uids))
        if not wanted:
            return
        if wanted[0] <= 0:
            raise ValueError(f"uid {wanted[0]}: killing as root would kill every process")
        request = (" ".join(map(str, wanted)) + "\n").encode()
        what = f"uid {wanted[0]}" if len(wanted) == 1 else f"{len(wanted)} accounts"
        with self._lock:
            for attempt in (1, 2):  # a helper that died since its last use is started again
                try:
                    reply = self._ask(request)
                except OSError as exc:
                    self._discard()
                    if attempt == 2:
                        raise AccountKillError(
                            f"cannot kill the processes of {what}: {exc}"
                        ) from exc
                    continue
                if reply == b"ok":
                    return
                self._discard()
                if reply.startswith(b"error") or attempt == 2:
                    why = reply.decode(errors="replace") or "the helper exited"
                    raise AccountKillError(f"cannot kill the processes of {what}: {why}")

    def close(self) -> None:
        with self._lock:
            self._discard()

    def _ask(self, request: bytes) -> bytes:
        proc = self._helper()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(request)
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], REPLY_TIMEOUT_S)
        if not ready:
            raise OSError(f"no answer from the helper within {REPLY_TIMEOUT_S:.0f}s")
        return proc.stdout.readline().strip()

    def _helper(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            self._discard()
            self._proc = subprocess.Popen(  # a fixed program: the uids go on its stdin
                [self._python, "-I", "-S", "-c", HELPER_PROGRAM],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env={"PATH": "/usr/bin:/bin"},
                cwd="/",
            )
        return self._proc

    def _discard(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        try:
            proc.wait(timeout=5)  # its stdin closed: it ends at once
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


_killer = AccountKiller()


def kill_accounts(uids: Iterable[int]) -> None:
    """SIGKILL every process of these accounts (the shared helper; needs root)."""
    _killer.kill(uids)


def kill_account(uid: int) -> None:
    """:func:`kill_accounts` for one account."""
    _killer.kill([uid])


def close() -> None:
    """End the shared helper (started again if used later)."""
    _killer.close()


def helper_pid() -> int | None:
    """The shared helper's pid while it runs (for tests and diagnostics)."""
    proc = _killer._proc
    return proc.pid if proc is not None and proc.poll() is None else None
