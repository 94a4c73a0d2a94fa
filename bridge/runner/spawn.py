"""Starting a runner process without a thread per child: Popen on the loop, exit by pidfd.

``asyncio.create_subprocess_exec`` on CPython 3.11 watches each child with a new thread
(``ThreadedChildWatcher``), and starting a thread blocks the event loop until the thread
is scheduled: on a busy machine that is a visible share of every run. Here the process is
started with :class:`subprocess.Popen` on the loop thread (``vfork``: the identity switch is
``setpriv``'s, see :mod:`provisioning.sandbox`), its pipes become asyncio streams, and its
exit is watched through a pid file descriptor (Linux 5.3+) registered with the loop, which
also says "exited" while a leftover child still holds the pipes. The process group (the
runner leads its own session) is killed at that moment, before the leader is reaped. Where
``pidfd_open`` is missing, asyncio's own subprocess support is used instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from typing import Any, Protocol


class Child(Protocol):
    """What a run needs of its process (``asyncio.subprocess.Process`` has it too)."""

    pid: int

    @property
    def returncode(self) -> int | None: ...

    stdin: asyncio.StreamWriter | None
    stdout: asyncio.StreamReader | None
    stderr: asyncio.StreamReader | None

    async def wait(self) -> int: ...


class PidfdChild:
    """A started process: streams on its pipes, its exit seen on a pidfd."""

    # True: the process group was sent SIGKILL when the leader exited, before it was reaped
    # (while its pid, hence its group id, could not be reused by another process)
    group_killed_at_exit = True
    # True: wait() returns once the process is reaped, whoever still holds its pipes
    exit_seen_at_reap = True

    def __init__(self, popen: subprocess.Popen[bytes], pidfd: int) -> None:
        self.popen = popen
        self.pid = popen.pid
        self._pidfd: int | None = pidfd
        self._exit: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.stdin: asyncio.StreamWriter | None = None
        self.stdout: asyncio.StreamReader | None = None
        self.stderr: asyncio.StreamReader | None = None

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        assert self.popen.stdin and self.popen.stdout and self.popen.stderr
        assert self._pidfd is not None
        loop.add_reader(self._pidfd, self._reap)
        self.stdout = await _reader(loop, self.popen.stdout)
        self.stderr = await _reader(loop, self.popen.stderr)
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, self.popen.stdin
        )
        self.stdin = asyncio.StreamWriter(transport, protocol, None, loop)

    def _reap(self) -> None:
        """The pidfd is readable: the process has exited; collect its status.

        Before reaping it, whatever is left in its process group is killed: until the
        zombie is reaped its pid cannot name another process's group, after that it can.
        """
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        self._close_pidfd()
        try:
            code = self.popen.wait(timeout=0)
        except subprocess.TimeoutExpired:  # not possible once the pidfd is readable
            code = self.popen.wait()
        if not self._exit.done():
            self._exit.set_result(code)

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            fd, self._pidfd = self._pidfd, None
            with contextlib.suppress(ValueError, RuntimeError):  # loop already closed
                asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)

    async def wait(self) -> int:
        return await asyncio.shield(self._exit)

    def abandon(self) -> None:
        """Stop watching (start failed part way): kill and reap without the loop."""
        self._close_pidfd()
        with contextlib.suppress(ProcessLookupError):
            self.popen.kill()
        self.popen.wait()


async def _reader(loop: asyncio.AbstractEventLoop, pipe: Any) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(loop=loop)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe)
    return reader


@functools.lru_cache(maxsize=1)
def pidfds_work() -> bool:
    """Whether this kernel and Python give pid file descriptors (checked once)."""
    if not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return False
    return True


# called with the new process's pid and its stdin's file descriptor as soon as it exists
Started = Callable[[int, int], None]


async def start_process(
    argv: Sequence[str], started: Started | None = None, **kwargs: Any
) -> Child:
    """Start ``argv`` with three pipes; ``kwargs`` as for :class:`subprocess.Popen`.

    ``started(pid, stdin_fd)`` runs as soon as the process exists, before its pipes become
    streams (a run's gate opens there, :mod:`provisioning.gate`); what it raises kills the
    process and is raised. Raises what ``Popen`` raises (``FileNotFoundError``,
    ``PermissionError``) when the program cannot be started.
    """
    pipe = subprocess.PIPE
    if not pidfds_work():
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=pipe, stdout=pipe, stderr=pipe, **kwargs
        )
        if started is not None:
            assert proc.stdin is not None
            try:
                started(proc.pid, proc.stdin.transport.get_extra_info("pipe").fileno())
            except BaseException:
                await abandon(proc)
                raise
        return proc
    popen: subprocess.Popen[bytes] = subprocess.Popen(
        list(argv), bufsize=0, stdin=pipe, stdout=pipe, stderr=pipe, **kwargs
    )
    try:
        if started is not None:
            assert popen.stdin is not None
            started(popen.pid, popen.stdin.fileno())
        pidfd = os.pidfd_open(popen.pid)
    except BaseException:
        popen.kill()
        popen.wait()
        raise
    child = PidfdChild(popen, pidfd)
    try:
        await child._connect()
    except BaseException:
        child.abandon()
        raise
    return child


async def abandon(child: Child) -> None:
    """Kill and reap a started process the run will not use (its start failed after
    :func:`start_process`)."""
    if isinstance(child, PidfdChild):
        child.abandon()  # killed: the reaping wait is short
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(child.pid, signal.SIGKILL)
    await child.wait()
