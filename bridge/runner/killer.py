"""Killing every process of a conversation's account at once, fork chains included.

A ``/proc`` scan cannot see everything: a process that forks and exits in a loop (a fork
chain) lives microseconds per generation, so the pid a scan lists is gone by the time it
is read, and the chain escapes every scan and every group kill aimed at a pid it saw.
``kill(-1, SIGKILL)`` made *as the account* cannot be outrun: it signals every process
the caller may signal, and the kernel walks the task list under the lock ``fork`` needs
to add a process.

Who may signal whom: a caller without privileges reaches a process when the caller's
real or effective uid is the process's real or saved uid. The calls are made through one
small root helper process (:class:`AccountKiller`, started on first use and kept, so a
sweep starts no program; a uid switch is per process, never made in the gateway's own
threads). Per account the helper forks a child that takes the account's uid as its
*effective* uid only, with an idle uid (no account, no process: found at the helper's
start) as its real and saved uid, drops its groups and capabilities, checks all of that,
and calls ``kill(-1, SIGKILL)``: it reaches every process whose real or saved uid is the
account's, while none of those may signal the child (their uids match neither of its
two). Neither the helper nor its child can be stopped or killed by the account, so the
kill cannot be held off (an earlier design, where the child took the account's uid in
full, could be killed by the account in the moment before its kill).
"""

from __future__ import annotations

import logging
import select
import subprocess
import sys
import threading
from collections.abc import Iterable

from provisioning.uid_map import UID_MAX

log = logging.getLogger(__name__)

ATTEMPTS = 5  # per account, should a child die or stay stopped before its kill
CONTINUES = 1000  # a stopped child is continued this often, then replaced

IDLE_IDS = range(2**31 - 3, 2**31 - 3 - 64, -1)  # the helper's idle id: the highest free one
# of these, or (in a user namespace that maps fewer ids) the highest free mapped ones

HELPER_PROGRAM = f"""
import grp, os, pwd, signal, sys

def unused(i):
    # no account, no group, no process with the id (real, effective, saved or fs)
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(i)
            return False
        except KeyError:
            pass
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/status" % name) as fh:
                    ids = [l.split()[1:] for l in fh if l.startswith(("Uid:", "Gid:"))]
            except OSError:
                continue
            if any(str(i) in row for row in ids):
                return False
    return True

def mapped(path):
    # the ids usable here (a user namespace maps only some), as (lowest, highest) ranges
    try:
        with open(path) as fh:
            rows = [[int(x) for x in line.split()] for line in fh if line.strip()]
    except OSError:
        return [(0, 2**32 - 2)]
    return [(low, low + count - 1) for low, _, count in rows]

def candidates():
    uids, gids = mapped("/proc/self/uid_map"), mapped("/proc/self/gid_map")
    for low, high in sorted(uids, key=lambda r: -r[1]):
        top = min(high, {IDLE_IDS.start})
        for i in range(top, max(low, top - {len(IDLE_IDS)}, 1) - 1, -1):
            if any(a <= i <= b for a, b in gids):
                yield i

IDLE = next((i for i in candidates() if unused(i)), None)
if IDLE is None:
    sys.stdout.write("error no idle uid for the kill\\n")
    sys.stdout.flush()
    os._exit(1)

def kill_as(uid):
    for attempt in range({ATTEMPTS}):
        pid = os.fork()
        if pid == 0:
            # The child acts as the account (effective uid) while its real and saved uid
            # are an idle one: kill(-1) reaches the processes whose real or saved uid is
            # the account's, and none of them may signal this child (they match neither).
            code = 0
            try:
                os.closerange(0, 256)
                os.setgroups([])
                os.setresgid(IDLE, IDLE, IDLE)
                os.setresuid(IDLE, uid, IDLE)
                with open("/proc/self/status") as fh:  # no capability kept (CAP_KILL: all)
                    caps = [l.split()[1] for l in fh if l.startswith("CapEff:")]
                if os.getresuid() != (IDLE, uid, IDLE):
                    code = 3
                elif caps != ["0000000000000000"]:
                    code = 5
                else:
                    os.kill(-1, signal.SIGKILL)  # every process of the uid, never itself
            except ProcessLookupError:
                pass
            except BaseException:
                code = 4
            os._exit(code)
        for _ in range({CONTINUES}):
            _, status = os.waitpid(pid, os.WUNTRACED)
            if not os.WIFSTOPPED(status):
                break
            os.kill(pid, signal.SIGCONT)  # stopped (not by the account: by root): go on
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            continue
        if os.WIFEXITED(status):
            if os.WEXITSTATUS(status) == 0:
                return None
            why = {{3: "the uid did not switch", 5: "capabilities were kept"}}
            code = os.WEXITSTATUS(status)
            return "uid %d: not killed as it: %s" % (uid, why.get(code, "exit %d" % code))
    return "uid %d: the kill was stopped {ATTEMPTS} times" % uid

for line in sys.stdin:
    failed = []
    for word in line.split():
        uid = int(word)
        ok = 0 < uid <= {UID_MAX} and uid != IDLE
        failed.append(kill_as(uid) if ok else "uid %d refused" % uid)
    failed = [f for f in failed if f]
    sys.stdout.write("error " + "; ".join(failed[:3]) + "\\n" if failed else "ok\\n")
    sys.stdout.flush()
"""
REPLY_TIMEOUT_S = 30.0  # bound on one request, plus PER_ACCOUNT_S for each account in it
PER_ACCOUNT_S = 0.01  # a fork, two system calls and a wait: about 0.5 ms here


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
        wrong = [uid for uid in wanted if not 0 < uid <= UID_MAX]
        if wrong:
            raise ValueError(f"uid {wrong[0]}: not an account's uid (it would kill every process)")
        request = (" ".join(map(str, wanted)) + "\n").encode()
        what = f"uid {wanted[0]}" if len(wanted) == 1 else f"{len(wanted)} accounts"
        with self._lock:
            for attempt in (1, 2):  # a helper that died since its last use is started again
                try:
                    reply = self._ask(request, REPLY_TIMEOUT_S + PER_ACCOUNT_S * len(wanted))
                except OSError as exc:
                    self._discard()
                    if attempt == 2:
                        raise AccountKillError(
                            f"cannot kill the processes of {what}: {exc}"
                        ) from exc
                    continue
                if reply == b"ok":
                    return
                if reply.startswith(b"error "):  # the helper is fine; some account was not
                    why = reply[6:].decode(errors="replace")
                    raise AccountKillError(f"cannot kill the processes of {what}: {why}")
                self._discard()  # it ended (or answered nonsense): a new one, once
                if attempt == 2:
                    raise AccountKillError(
                        f"cannot kill the processes of {what}: the helper ended without a reply"
                    )

    def close(self) -> None:
        with self._lock:
            self._discard()

    def _ask(self, request: bytes, timeout: float) -> bytes:
        proc = self._helper()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(request)
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        if not ready:
            raise OSError(f"no answer from the helper within {timeout:.0f}s")
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
