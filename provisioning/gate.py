"""A run's first process waits at a gate until its limits are set: no ``prlimit`` exec.

Why: a run's rlimits must hold before it executes a line of its own, and ``Popen`` can
set none without a ``preexec_fn`` (which rules out ``vfork``). Every run used to start
behind util-linux ``prlimit``, an exec of its own: about 0.8 ms of CPU and of latency per
run (``/usr/bin/prlimit ... -- /bin/true`` against ``/bin/true``, 300 runs each), a tenth of
a short turn.

How: the run starts as ``/bin/sh`` reading one line of its stdin (``read`` takes a pipe
one byte at a time, so what follows the line, the prompt, is left for the runner). While it
waits it still has the gateway's identity, so the gateway sets the run's limits on it
(``prlimit(2)``, :meth:`RunLimits.apply`), then writes the line. The same shell then writes
its pid into the run's cgroup (:mod:`provisioning.cgroups`), if it has one, and ``exec``-s
the rest in place: ``setpriv``, the runner. Everything after inherits the limits, across
the identity switch, and is born in the cgroup. A gateway that goes away before it opened
the gate leaves a shell reading end-of-file: it exits with :data:`GATE_FAILED` and runs
nothing, never without its limits.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import RlimitsUnavailable
from .rlimits import RunLimits

SHELL = "/bin/sh"
# $1: how many cgroup.procs files follow; each gets our pid (as root, before the identity
# switch); then exec the rest. Exit GATE_FAILED when the gate or a cgroup write fails.
GATE_SCRIPT = (
    'read -r _ || exit 125; n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ >"$1" || exit 125; '
    'shift; n=$((n - 1)); done; exec "$@"'
)
GATE_FAILED = 125  # the run's exit code when it was not let through, or not into its cgroup
OPEN_LINE = b"\n"  # what the gateway writes on the run's stdin to let it go


def needed(limits: RunLimits, procs_files: Sequence[Path | str]) -> bool:
    """Whether a run needs the gate: it has limits, or a cgroup to enter."""
    return limits.any or bool(procs_files)


def gated(argv: Sequence[str], procs_files: Sequence[Path | str] = ()) -> list[str]:
    """``argv`` started behind the gate, entering the cgroups whose ``cgroup.procs``
    files are given (see the module)."""
    files = [str(f) for f in procs_files]
    return [SHELL, "-c", GATE_SCRIPT, "sh", str(len(files)), *files, *argv]


def set_limits(pid: int, limits: RunLimits) -> None:
    """Set ``limits`` on the waiting gate process ``pid``; before :data:`OPEN_LINE`.

    Raises :class:`RlimitsUnavailable` when the kernel refuses one."""
    try:
        limits.apply(pid)
    except OSError as exc:
        raise RlimitsUnavailable(
            f"the kernel refused the run's limits ({exc.strerror}); set the limits.run_max_* "
            "keys to 0 to run without them"
        ) from exc


def open_gate(pid: int, stdin_fd: int, limits: RunLimits) -> None:
    """Set ``limits`` on the gate process ``pid``, then let it go: :data:`OPEN_LINE` on its
    stdin (``stdin_fd``, the pipe's write end, empty: one byte never blocks). Raises
    :class:`RlimitsUnavailable` as :func:`set_limits`; the caller then kills the process."""
    set_limits(pid, limits)
    with contextlib.suppress(BrokenPipeError):  # it died already: its exit code says why
        os.write(stdin_fd, OPEN_LINE)


def start(
    argv: Sequence[str],
    limits: RunLimits,
    procs_files: Sequence[Path | str] = (),
    **popen: Any,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` behind the gate with blocking ``Popen`` (stdin a pipe, bytes), its
    limits set and the gate open; the caller reads and reaps it. For blocking callers: the
    gateway's runs go through :mod:`bridge.runner.spawn` and open the gate themselves."""
    proc: subprocess.Popen[bytes] = subprocess.Popen(
        gated(argv, procs_files), stdin=subprocess.PIPE, **popen
    )
    assert proc.stdin is not None
    try:
        open_gate(proc.pid, proc.stdin.fileno(), limits)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc
