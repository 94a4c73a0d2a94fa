"""The ``limits.run_max_*`` keys as a run's limits, and what a person is told when a run
hits one.

Why a module: the mechanism (the gate, which kernel limit counts what) is
provisioning's; the keys and the words, naming the key an operator raises, are the
gateway's, and both the turn and ``doctor`` use them.
"""

from __future__ import annotations

from collections.abc import Sequence

from provisioning.rlimits import LimitHit, RunLimits

from ..config import LimitsSettings

GIB = 1024**3
MIB = 1024**2


def from_settings(limits: LimitsSettings) -> RunLimits:
    """The limits a run starts under (before fitting them to its account)."""
    return RunLimits(
        processes=limits.run_max_processes,
        memory_bytes=limits.run_max_memory_bytes,
        cpu_s=limits.run_max_cpu_s,
        file_bytes=limits.run_max_file_bytes,
    )


def size(n: int) -> str:
    """A byte count as people read it: ``8 GiB``, ``1.5 GiB``, ``512 MiB``, ``1000 bytes``."""
    for unit, name in ((GIB, "GiB"), (MIB, "MiB")):
        if n >= unit:
            return f"{n // unit} {name}" if n % unit == 0 else f"{n / unit:.1f} {name}"
    return f"{n} bytes"


def hit_text(
    limits: RunLimits,
    exit_code: int | None,
    stderr: Sequence[str],
    *,
    measured: str | None = None,
    whole: RunLimits | None = None,
) -> str | None:
    """The sentence a failed run's reply gets when it most likely ran into one of its
    limits, naming the limit and its key; None when it did not. ``measured``: what the
    run's cgroup says it ran into (``memory``, ``processes``), over the whole run under
    ``whole`` (the limits before they were fitted to the run's account)."""
    whole = whole or limits
    if measured == LimitHit.MEMORY and whole.memory_bytes:
        return (
            "The run ran out of memory: together its processes may use at most "
            f"{size(whole.memory_bytes)} (`limits.run_max_memory_bytes`)."
        )
    if measured == LimitHit.PROCESSES and whole.processes:
        return (
            f"The run could not start a process: a run may have at most {whole.processes} "
            "processes and threads (`limits.run_max_processes`)."
        )
    hit = limits.hit(exit_code, stderr)
    if hit is LimitHit.CPU:
        return (
            f"The run used up its CPU time ({limits.cpu_s} s per process, "
            "`limits.run_max_cpu_s`) and was stopped."
        )
    if hit is LimitHit.FILE_SIZE:
        return (
            f"The run tried to write a file larger than {size(limits.file_bytes)} "
            "(`limits.run_max_file_bytes`)."
        )
    if hit is LimitHit.MEMORY:
        return (
            "The run likely ran out of memory: each of its processes may use at most "
            f"{size(limits.memory_bytes)} (`limits.run_max_memory_bytes`)."
        )
    if hit is LimitHit.PROCESSES:
        return (
            "The run likely could not start a process: a conversation may have at most "
            f"{limits.processes} processes and threads (`limits.run_max_processes`)."
        )
    return None
