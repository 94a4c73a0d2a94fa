"""A run's own PID namespace and ``/proc``: no conversation sees another's command line.

The released Jazz CLI takes approvals on stdin only when the prompt is its positional
argument, and ``/proc/<pid>/cmdline`` is world-readable: every other conversation's agent
(and any local account) could read each person's message there, and the conversation key
beside it. So a run starts in a PID namespace of its own, in a user namespace of its own
account (``unshare --user --map-current-user``: no root needed, the run keeps its uid and
gains nothing over files it could not already reach), with a fresh ``/proc`` mounted for
that namespace: the run sees its own processes and nothing else, whatever the host's
``/proc`` shows. The gateway's view is unchanged (its sweeps, its killer).

The namespace's first process is a tiny shell (:data:`INIT`), not the runner: the kernel
ignores a signal sent to a namespace's init unless it installed a handler, so a runner as
init would not stop on SIGTERM nor die of its own SIGABRT. The shell traps TERM and INT
(a trap, not an ignore: the runner must not inherit SIG_IGN), runs the runner in the
foreground with the same stdin, stdout and stderr (its own stderr, where it would print
"Terminated", goes nowhere) and exits with its status, which a shell reports as 128+N for
a death by signal N (:func:`exit_code`). When it exits, the kernel kills everything left in
the namespace at once: a daemon the run started with ``setsid`` and a cleared environment
included, which is what single-account runs otherwise need their own subreaper for.
``--kill-child`` takes the namespace down with ``unshare`` if that is killed.

Where user namespaces are refused (a container's seccomp profile, a sysctl, a unit's
``RestrictNamespaces``), :func:`unavailable_reason` says why once and runs start as before.
"""

from __future__ import annotations

import functools
import logging
import shutil
import subprocess
from collections.abc import Sequence

log = logging.getLogger(__name__)

# the namespace's init: trap (never ignore) the stop signals, run the runner in the
# foreground, exit as it did; the shell's own messages ("Terminated") go nowhere
INIT = 'trap : TERM INT; exec 3>&2 2>/dev/null; "$@" 2>&3 3>&-; exit $?'
INIT_NAME = "jazz-bridge-run"  # $0 of the init shell, as ps shows it
SHELL = "/bin/sh"
UNSHARE_ARGS = (
    "--user",
    "--map-current-user",
    "--pid",
    "--fork",
    "--mount-proc",
    "--kill-child",
)
PROBE_TIMEOUT_S = 10.0
MAX_SIGNAL = 64  # a shell's 128+N exit means death by signal N for N up to here


@functools.lru_cache(maxsize=1)
def unshare_path() -> str | None:
    """util-linux ``unshare`` when installed (checked once)."""
    return shutil.which("unshare", path="/usr/bin:/bin:/usr/sbin:/sbin")


def wrap(argv: Sequence[str]) -> list[str]:
    """``argv`` started in a PID namespace with a private ``/proc`` (see the module)."""
    unshare = unshare_path()
    if unshare is None:
        raise RuntimeError("unshare is not installed")
    return [unshare, *UNSHARE_ARGS, "--", SHELL, "-c", INIT, INIT_NAME, *argv]


def exit_code(returncode: int | None) -> int | None:
    """The runner's own exit status behind the init shell: 128+N is death by signal N,
    told as asyncio tells one (-N)."""
    if returncode is not None and 128 < returncode <= 128 + MAX_SIGNAL:
        return -(returncode - 128)
    return returncode


HIDING_HIDEPID = frozenset({"2", "invisible", "4", "ptraceable"})


def proc_hides_other_uids(mountinfo: str = "/proc/self/mountinfo") -> bool:
    """Whether this process's ``/proc`` already hides other accounts' processes (mounted
    with ``hidepid=invisible``, as systemd's ``ProtectProc=invisible`` does): isolated runs,
    each its own uid, then cannot read each other's command lines without a namespace."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return False
    hidepid = None
    for line in lines:  # the last /proc mount is the one on top, the one seen
        fields = line.split()
        if len(fields) < 10 or fields[4] != "/proc" or "-" not in fields:
            continue
        after = fields[fields.index("-") + 1 :]  # fstype, source, super options
        if after[0] != "proc" or len(after) < 3:
            continue
        options = dict(opt.partition("=")[::2] for opt in after[2].split(","))
        hidepid = options.get("hidepid")
    return hidepid in HIDING_HIDEPID


@functools.lru_cache(maxsize=4)
def unavailable_reason(as_prefix: tuple[str, ...] = ()) -> str | None:
    """Why runs cannot have a private ``/proc`` here (None when they can), probed once.

    ``as_prefix`` is what switches to a run's identity (``setpriv --reuid ...``): as root
    the probe runs as an unprivileged account, since a kernel may let root make user
    namespaces and refuse everyone else. The probe checks the namespace really is private:
    it sees only itself.
    """
    if unshare_path() is None:
        return "unshare (util-linux) is not installed"
    probe = [*as_prefix, *wrap(["sh", "-c", "ls /proc | grep -c '^[0-9]'"])]
    try:
        proc = subprocess.run(
            probe,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
            start_new_session=True,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare could not start: {exc}"
    if proc.returncode != 0:
        why = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"unshare refused ({why[-1] if why else f'exit code {proc.returncode}'})"
    seen = proc.stdout.decode("ascii", "replace").strip()
    if not seen.isdigit() or int(seen) > 4:  # the init, sh, ls, grep
        return f"the namespace's /proc was not private ({seen or 'nothing'} processes seen)"
    return None
