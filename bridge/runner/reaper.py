"""A run's own subreaper, for single-account mode, where nothing else can find all of a run.

Isolated runs are exact to sweep: every process of the conversation's uid is that run's.
In single-account mode every run (and the gateway) shares one uid, and a grandchild that
calls ``setsid`` and clears its environment (``setsid env -i sleep 600 &``, what a daemon
does) carries neither the run's process group nor its ``JAZZ_RUN_TAG``: it outlived its
run. A cgroup would contain it, but an unprivileged gateway seldom has one to give.

So a single-account run starts behind this small stdlib program (``wrap``), started with
``python -I -S``: it marks itself a *child subreaper* (``PR_SET_CHILD_SUBREAPER``, Linux
3.4+), so every process the runner leaves behind is re-parented to it instead of to init,
and starts the runner in a session of its own, as the gateway does without it. A stop
signal (the gateway's SIGTERM, or the gateway dying: ``PR_SET_PDEATHSIG``) is passed on to
the runner's process group (and to the runner, should it have left that group); the runner
gets half of the gateway's kill grace, then everything below the reaper is killed, so the
gateway's own SIGKILL never has to take the reaper first and set the rest loose. Once the
runner has exited, every process still below is SIGKILLed (each one's process group too: a
group kill cannot be outrun by ``fork``) and reaped, and the reaper exits as the runner did
(the same code, or the same signal). Where ``prctl`` is missing the program simply becomes
the runner (``exec``): the gateway's group and tag sweep still apply.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Sequence

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
KILL_ROUNDS_S = 3.0  # bound on killing what is left below the reaper
POLL_S = 0.01  # between kill rounds while the kernel tears processes down
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
RESTORED_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)


def wrap(argv: Sequence[str], kill_grace_s: float, python: str | None = None) -> list[str]:
    """``argv`` started behind this reaper (the runner gets half the grace after SIGTERM)."""
    return [python or sys.executable, "-I", "-S", __file__, f"{kill_grace_s / 2:.3f}", "--", *argv]


def _prctl(option: int, value: int) -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _children(pid: int) -> list[int] | None:
    """``pid``'s children (every thread's), None where the kernel does not list them."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []  # gone meanwhile
    found: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                found.extend(int(child) for child in fh.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended
            return None  # no CONFIG_PROC_CHILDREN: the whole-/proc walk instead
        except OSError:
            continue
    return found


def _descendants(root: int) -> list[int]:
    """Every process below ``root``: from the children lists (a few small reads, fast
    enough to catch a process that forks and exits in a loop), else one pass over /proc."""
    found: list[int] = []
    todo = [root]
    while todo:
        children = _children(todo.pop())
        if children is None:
            return _scanned_descendants(root)
        found.extend(children)
        todo.extend(children)
    return found


def _scanned_descendants(root: int) -> list[int]:
    """:func:`_descendants` from every process's parent in ``/proc/<pid>/stat``."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (comm) "
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(name))
    found: list[int] = []
    todo = [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            found.append(pid)
            todo.append(pid)
    return found


def _reap_any() -> bool:
    """Reap every child that has exited; False once there are no children at all."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def kill_below(root: int, deadline_s: float = KILL_ROUNDS_S) -> None:
    """SIGKILL every process below ``root`` and reap them, until none is left (bounded)."""
    end = time.monotonic() + deadline_s
    while True:
        left = _kill(_descendants(root))
        if not _reap_any() and not left:
            return  # no child at all: everything below is gone (orphans come to us)
        if time.monotonic() >= end:
            return
        if not left:
            time.sleep(POLL_S)  # only dying ones left: let the kernel tear them down


def _kill(pids: list[int]) -> list[int]:
    """SIGKILL ``pids`` and their process groups (never the reaper's own)."""
    ours = os.getpgid(0)
    groups: set[int] = set()
    for pid in pids:
        try:
            groups.add(os.getpgid(pid))
        except ProcessLookupError:
            pass
    for group in groups - {ours}:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return pids


def _relay(runner: int, signum: int) -> None:
    """Pass a stop signal on to the runner's group, and to the runner if it left it."""
    try:
        os.killpg(runner, signum)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        if os.getpgid(runner) != runner:
            os.kill(runner, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _exit_as(status: int) -> None:
    """Leave the way the runner left: its exit code, or killed by its signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            signal.signal(sig, signal.SIG_DFL)  # ours, and Python's SIG_IGN for SIGPIPE
        except (OSError, ValueError):
            pass  # SIGKILL, SIGSTOP: always default
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the runner's core, not ours
        except (ImportError, ValueError, OSError):
            pass
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def main(args: Sequence[str]) -> None:
    if len(args) < 3 or args[1] != "--":
        sys.stderr.write("usage: reaper.py KILL_AFTER_S -- PROGRAM [ARG...]\n")
        os._exit(2)
    kill_after = float(args[0])
    argv = list(args[2:])
    gateway = os.getppid()
    if not _prctl(PR_SET_CHILD_SUBREAPER, 1):
        os.execvp(argv[0], argv)  # noqa: S606  (nothing to add here: be the runner)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    me = os.getpid()
    runner = 0
    stopped: list[int] = []  # the stop signal, once one came
    relayed: list[int] = []

    def on_stop(signum: int, frame: object) -> None:
        if runner:  # (one that comes before the spawn is relayed right after it)
            _relay(runner, signum)
            relayed.append(signum)
        if not stopped:
            stopped.append(signum)
            signal.setitimer(signal.ITIMER_REAL, kill_after)

    def on_alarm(signum: int, frame: object) -> None:
        _kill(_descendants(me))  # the runner had its grace; the loop below reaps it

    for sig in STOP_SIGNALS:
        signal.signal(sig, on_stop)  # handlers, not SIG_IGN: exec resets them for the runner
    signal.signal(signal.SIGALRM, on_alarm)
    if os.getppid() != gateway:  # the gateway died before the death signal was armed
        os._exit(1)
    try:
        # a session of its own, as the gateway starts a runner; and as subprocess does,
        # the signals Python itself ignores are default again for it
        runner = os.posix_spawnp(argv[0], argv, os.environ, setsid=True, setsigdef=RESTORED_SIGNALS)
    except OSError as exc:
        sys.stderr.write(f"cannot start {argv[0]!r}: {exc.strerror}\n")
        os._exit(127)
    if stopped and not relayed:
        _relay(runner, stopped[0])
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:  # not possible while the runner is ours; be safe
            os._exit(1)
        if pid == runner:
            break
    signal.setitimer(signal.ITIMER_REAL, 0)
    kill_below(me)
    _exit_as(status)


if __name__ == "__main__":
    main(sys.argv[1:])
