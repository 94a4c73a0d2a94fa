"""Resource limits of a run: processes, memory, CPU time and file size.

Why: a run had the gateway's own limits (``ulimit -u`` ~96k, address space and file size
unlimited, no CPU bound), so one conversation's agent could start 1,500 processes, fill the
disk with one file or take the machine's memory, for every conversation at once.

How: the run's first process waits at a gate (:mod:`provisioning.gate`) while the gateway
sets them on it with ``prlimit(2)``, before the identity switch, so root sets the hard
limits too and the run can only lower them. The limits are the kernel's per-process
rlimits:

* ``RLIMIT_NPROC`` (processes and threads) is counted per *uid*: isolated, every
  conversation is its own account, so it bounds that conversation's run and everything it
  starts. In single-account mode every run shares the gateway's uid (the gateway's own
  threads included), so the process cap is not applied there (:attr:`RunLimits.for_account`).
* ``RLIMIT_AS`` (address space), ``RLIMIT_CPU`` (seconds of CPU; SIGXCPU, then SIGKILL a
  few seconds later) and ``RLIMIT_FSIZE`` (bytes of one file; SIGXFSZ or EFBIG) bound each
  process of the run. ``RLIMIT_CORE`` is 0: a crashing run writes no core into its home.

Where the host lets the gateway make cgroups, each run also gets one
(:mod:`provisioning.cgroups`): memory and processes over the whole run. The rlimits work
everywhere, as root and not. Under the systemd unit, ``TasksMax=`` and ``MemoryMax=``
bound the gateway and all its runs together.
"""

from __future__ import annotations

import resource
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

CPU_KILL_GRACE_S = 5  # SIGXCPU at the soft limit, SIGKILL this much CPU time later
SIGXCPU = 24
SIGXFSZ = 25
# what runtimes print when an allocation fails (Bun/JavaScriptCore, Node/V8, C, C++, Python)
OUT_OF_MEMORY_MARKS = (
    "out of memory",
    "cannot allocate memory",
    "std::bad_alloc",
    "memoryerror",
    "allocation failed",
)
# what a write refused by RLIMIT_FSIZE reads as where SIGXFSZ is ignored (Python ignores it)
FILE_TOO_LARGE_MARKS = ("file too large", "efbig")
# what a fork refused by RLIMIT_NPROC reads as (EAGAIN)
FORK_REFUSED_MARKS = (
    "resource temporarily unavailable",
    "cannot fork",
    "fork failed",
    "eagain",
)


class LimitHit(StrEnum):
    """Which limit a failed run most likely ran into."""

    CPU = "cpu"
    FILE_SIZE = "file_size"
    MEMORY = "memory"
    PROCESSES = "processes"


@dataclass(frozen=True)
class RunLimits:
    """A run's limits; 0 (or None) leaves that one as the gateway's."""

    processes: int = 0  # RLIMIT_NPROC: processes and threads of the run's account
    memory_bytes: int = 0  # RLIMIT_AS of each process
    cpu_s: int = 0  # RLIMIT_CPU of each process, in seconds
    file_bytes: int = 0  # RLIMIT_FSIZE: the largest file a process may write

    @property
    def any(self) -> bool:
        return bool(self.processes or self.memory_bytes or self.cpu_s or self.file_bytes)

    def for_account(self, own_account: bool) -> RunLimits:
        """These limits for a run of its own account (isolated) or of the gateway's: the
        process count is per uid, so a shared uid gets none (see the module)."""
        return self if own_account else replace(self, processes=0)

    def settings(self) -> list[tuple[int, tuple[int, int]]]:
        """The kernel limits these set, as ``(RLIMIT_*, (soft, hard))``: soft and hard alike,
        except CPU (the hard limit a few seconds later, so SIGXCPU comes first and says
        why), and no core files. None above the gateway's own hard limit: raising one takes
        CAP_SYS_RESOURCE, which the unit does not grant, and a refused limit would fail
        every run."""
        found = [(resource.RLIMIT_CORE, (0, 0))]
        for which, value in (
            (resource.RLIMIT_NPROC, self.processes),
            (resource.RLIMIT_AS, self.memory_bytes),
            (resource.RLIMIT_FSIZE, self.file_bytes),
        ):
            if value:
                value = _within_hard(which, value)
                found.append((which, (value, value)))
        if self.cpu_s:
            soft = _within_hard(resource.RLIMIT_CPU, self.cpu_s)
            hard = _within_hard(resource.RLIMIT_CPU, self.cpu_s + CPU_KILL_GRACE_S)
            found.append((resource.RLIMIT_CPU, (soft, hard)))
        return found

    def apply(self, pid: int) -> None:
        """Set these limits on process ``pid`` (``prlimit(2)``: one of the gateway's
        identity, or the gateway itself with 0). Raises OSError when one is refused."""
        for which, limits in self.settings():
            resource.prlimit(pid, which, limits)

    def hit(self, exit_code: int | None, stderr: Sequence[str]) -> LimitHit | None:
        """Which limit a failed run most likely hit, from how it ended and what it printed:
        a death by SIGXCPU or SIGXFSZ says so itself; a refused write, allocation or fork
        only as the runtime words it (a best guess: the memory and process hints say
        "likely")."""
        if exit_code == -SIGXCPU and self.cpu_s:
            return LimitHit.CPU
        if exit_code == -SIGXFSZ and self.file_bytes:
            return LimitHit.FILE_SIZE
        text = "\n".join(stderr).lower()
        if self.file_bytes and any(mark in text for mark in FILE_TOO_LARGE_MARKS):
            return LimitHit.FILE_SIZE
        if self.memory_bytes and any(mark in text for mark in OUT_OF_MEMORY_MARKS):
            return LimitHit.MEMORY
        if self.processes and any(mark in text for mark in FORK_REFUSED_MARKS):
            return LimitHit.PROCESSES
        return None


def _within_hard(which: int, value: int) -> int:
    """``value``, or the gateway's own hard limit of ``which`` when that is lower."""
    hard = resource.getrlimit(which)[1]
    return value if hard == resource.RLIM_INFINITY else min(value, hard)
