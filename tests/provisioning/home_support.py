"""Helpers the provisioning tests share: an entry's exact mode and owner, files and directories
made with an exact mode, a command run as another account, the deep walk of a home, names
swapped under it, calls that must end in bounded time, and commands started behind a
run's gate.

Its own module, not ``conftest``: every directory's ``conftest.py`` is imported under that one
name, so tests import helpers from here (as from ``accounts_support``) and take fixtures from
the conftest files.
"""

from __future__ import annotations

import ctypes
import os
import stat
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from provisioning import gate
from provisioning.rlimits import RunLimits
from provisioning.walk import WalkReport, repair_home_tree

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
OTHER_UID = 65530  # an account nothing on a test host uses
# a name a conversation may give an entry: a newline, a forged line, a terminal escape, no UTF-8
HOSTILE_NAME = b"x\n  failed: forged line\x1b[2J\xff"
CONFIG_TOKEN = "xoxb-THE-GATEWAYS-SECRET-TOKEN"  # what the gateway's config holds: never leaked

T = TypeVar("T")


def mode(path: Path) -> int:
    """The permission bits of ``path`` itself (never a link's target)."""
    return stat.S_IMODE(os.lstat(path).st_mode)


def owner(path: Path) -> tuple[int, int]:
    """The uid and gid of ``path`` itself (never a link's target)."""
    st = os.lstat(path)
    return st.st_uid, st.st_gid


def make(path: Path, m: int, data: str = "x") -> Path:
    """A file holding ``data`` with exact mode ``m`` (as the test's account: root, or not)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data)
    os.chmod(path, m)
    return path


def mkdir(path: Path, m: int) -> Path:
    """A directory (and its parents) with exact mode ``m``."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, m)
    return path


def as_uid(
    uid: int,
    gid: int,
    *argv: str,
    init_groups: bool = False,
    timeout: float = 60,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``argv`` run as ``uid``/``gid`` (bounded): with no other group, what a conversation's
    run is, or with the account's own groups (``init_groups``: an operator in its group)."""
    groups = "--init-groups" if init_groups else "--clear-groups"
    return subprocess.run(
        ["setpriv", "--reuid", str(uid), "--regid", str(gid), groups, "--", *argv],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        cwd=cwd,
        env=env,
    )


def as_nobody(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``argv`` run as nobody in ``cwd`` with a plain environment (a gateway without root)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    return as_uid(NOBODY, NOBODY, *argv, cwd=cwd, env=env)


def bounded(fn: Callable[[], T], timeout: float = 30.0) -> T:
    """Run ``fn`` in a thread and wait at most ``timeout`` seconds (a FIFO opened would hang)."""
    out: list[T] = []
    err: list[BaseException] = []

    def target() -> None:
        try:
            out.append(fn())
        except BaseException as exc:
            err.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"still running after {timeout} s (blocked opening something?)"
    if err:
        raise err[0]
    return out[0]


_libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_EXCHANGE = 2


def exchange(a: bytes, b: bytes) -> None:
    """Atomically swap two names (renameat2 RENAME_EXCHANGE): always one or the other."""
    if _libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), a.decode())


def walk(home: Path, *, setgid: bool = True, force: bool = False) -> WalkReport:
    """The deep walk of ``home`` as the gateway runs it for a home the test's account owns."""
    return repair_home_tree(home, setgid_home=setgid, owner_uid=os.geteuid(), force=force)


def open_fds() -> int:
    """How many descriptors this process holds open."""
    return len(os.listdir("/proc/self/fd"))


def gated_run(
    argv: list[str],
    limits: RunLimits | None = None,
    procs_files: list[Path] | None = None,
    timeout: float = 30.0,
    **popen: object,
) -> subprocess.CompletedProcess[str]:
    """``argv`` run to its end as the gateway starts a run: behind the gate, under
    ``limits``, in the cgroups of ``procs_files`` (stdin then closed; output as text)."""
    proc = gate.start(
        argv,
        limits or RunLimits(),
        procs_files or [],
        stdout=popen.pop("stdout", subprocess.PIPE),
        stderr=popen.pop("stderr", subprocess.PIPE),
        **popen,
    )
    out, err = proc.communicate(b"", timeout=timeout)  # stdin closed after the gate's line
    text = [(b or b"").decode(errors="replace") for b in (out, err)]
    return subprocess.CompletedProcess(proc.args, proc.returncode, *text)
