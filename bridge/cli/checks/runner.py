"""Doctor's checks of the runner serve would start, checked as a run starts it (isolated: as
``nobody``, no supplementary groups), and of which Jazz CLI it is.

The runner is only started when doctor runs as the gateway's account, since anyone else's
start would prove nothing about a run.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess

from bridge.runner.command import reference_copy
from provisioning.layout import Layout
from provisioning.private_proc import proc_hides_other_uids
from provisioning.sandbox import (
    DEFAULT_PATH,
    can_switch_users,
    private_proc_unavailable,
    setpriv_path,
)
from reference_runner import bundle

from ...config import CoreSettings
from ...runner.dialect import CliProfile
from .check import Check

PROBE_UID = PROBE_GID = 65534  # nobody/nogroup: an identity no account, file or group is made for
PROBE_TIMEOUT_S = 20.0
REACH_FIX = (
    "move the runner outside /root and /home, e.g. /usr/local/bin, or make each directory "
    "on its path traversable by others"
)


def cli_checks(settings: CoreSettings, profile: CliProfile, isolated: bool) -> list[Check]:
    """Which Jazz CLI the runner is, and what serve can then do with it."""
    checks = [Check(True, f"runner CLI: {profile.describe()}")]
    if settings.runner.backend == "daemon" and not profile.has_daemon:
        checks.append(
            Check(
                False,
                'runner.backend = "daemon" has a `jazz daemon` to talk to',
                'this jazz has no `jazz daemon`: set runner.backend = "cli"',
            )
        )
    if profile.released:
        unavailable = private_proc_unavailable(isolated)
        hidden = unavailable is None or (isolated and proc_hides_other_uids())
        checks.append(
            Check(
                True,
                "runs' command lines are hidden from other conversations (approvals work)",
                f"{unavailable}: each message then goes on stdin, where the released CLI "
                "takes no approvals (allow user namespaces, or serve isolated as root under "
                "a /proc mounted hidepid=invisible, e.g. systemd's ProtectProc=invisible)",
                warn=not hidden,
            )
        )
    return checks


def runner_checks(settings: CoreSettings, runner_command: list[str], isolated: bool) -> list[Check]:
    """The runner serve would start, started the way a run starts it.

    Isolated, every run is a conversation's account with no supplementary groups: the
    runner, a script's ``#!`` interpreter and any file the command names must be reachable
    by others, and ``--help`` is started as ``nobody`` through the same ``setpriv`` path (as
    root, anything starts). Single-account, the gateway's own user is the run's.
    """
    command, copy = _served_command(settings, runner_command)
    path = os.environ.get("PATH") or DEFAULT_PATH
    exe = command[0]
    found = shutil.which(exe, path=path) if os.sep not in exe else exe
    if found is not None and not os.access(found, os.X_OK):
        found = None
    checks = [
        Check(
            bool(found),
            f"runner {' '.join(command)} found",
            "install jazz or set runner.command",
        )
    ]
    if not found:
        return checks
    as_other = isolated and can_switch_users()
    startable = True
    if isolated:
        for target, need in _needed(found, command[1:], path):
            blocked = _blocker(target, need)
            missing = target == copy and not os.path.exists(target)
            if blocked is None and as_other and not missing and not _probe_access(target, need):
                blocked = (target, f"not usable as uid {PROBE_UID}")
            fix = REACH_FIX
            if blocked is not None:
                bits = need if blocked[0] == target else stat.S_IXOTH  # a directory: traverse
                flags = ("r" if bits & stat.S_IROTH else "") + ("x" if bits & stat.S_IXOTH else "")
                fix += f" (chmod o+{flags} {blocked[0]})"
            checks.append(
                Check(
                    blocked is None,
                    f"runner file {target} reachable by conversation accounts"
                    + (f" (blocked at {blocked[0]}: {blocked[1]})" if blocked else "")
                    + (" (serve writes it)" if missing else ""),
                    fix,
                )
            )
            startable = startable and blocked is None and not missing
    elif copy is not None and not os.path.exists(command[1]):
        command = list(runner_command)  # the same script, until serve copies it
    if not startable:
        return checks
    elsewhere = _not_the_gateway(settings, isolated)
    if elsewhere:
        checks.append(Check(True, "runner starts (not started)", elsewhere, warn=True))
        return checks
    who = f" as uid {PROBE_UID}" if as_other else ""
    try:
        proc = _run_as([*command, "--help"], as_other, path)
        checks.append(
            Check(
                proc.returncode in (0, 1, 2),
                f"runner starts{who}",
                f"runner exited {proc.returncode}; check runner.command",
            )
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        checks.append(Check(False, f"runner starts{who}", f"{exc}; check runner.command"))
    return checks


def _not_the_gateway(settings: CoreSettings, isolated: bool) -> str:
    """Why starting the runner from this process would prove nothing ("" when it would).

    A run is started by the gateway's account: isolated, root switching to a conversation's
    account (probed as ``nobody``); single-account, the root's owner. Started as anyone else
    (an operator asking about the gateway's root), a start that works or fails is that
    person's, not a run's, so it is not tried and the line says who can try it.
    """
    me = os.geteuid()
    if isolated:
        if can_switch_users():
            return ""
        return (
            f"doctor runs as uid {me}, which cannot start it as a conversation account would; "
            "run jazz-bridge doctor as the gateway runs (root, with CAP_SETUID and "
            "CAP_SETGID) for that check"
        )
    try:
        owner = os.lstat(settings.root.absolute()).st_uid
    except OSError:
        return ""  # no root yet: its own checks say so, and whoever runs doctor will serve
    if owner == me:
        return ""
    return (
        f"doctor runs as uid {me}, not as the gateway's account (uid {owner}, the root's owner), "
        "whose runs these are; run jazz-bridge doctor as that account for that check"
    )


def _served_command(
    settings: CoreSettings, runner_command: list[str]
) -> tuple[list[str], str | None]:
    """``runner_command`` as serve starts it, and the reference runner's copy if that is it:
    the bundled reference runner is started from its copy under ``<root>/tools/`` (see
    :func:`bridge.runner.cli.default_command`), which serve writes (doctor only reads)."""
    package = os.path.realpath(bundle.PACKAGE)
    if len(runner_command) == 2 and os.path.realpath(runner_command[1]) == package:
        copy = str(reference_copy(Layout(settings.root.absolute()).tools))
        return [runner_command[0], copy], copy
    return list(runner_command), None


def _needed(exe: str, args: list[str], path: str) -> list[tuple[str, int]]:
    """Every file a run needs to start: the program (a script read too), its ``#!``
    interpreter (and the program ``/usr/bin/env`` looks up), files named by the command."""
    needed = [(exe, stat.S_IXOTH)]
    interpreter = _shebang(exe)
    if interpreter:
        needed = [(exe, stat.S_IXOTH | stat.S_IROTH), (interpreter[0], stat.S_IXOTH)]
        if os.path.basename(interpreter[0]) == "env" and len(interpreter) > 1:
            looked_up = shutil.which(interpreter[1], path=path)
            if looked_up:
                needed.append((looked_up, stat.S_IXOTH))
    if args and args[0].startswith(os.sep) and not os.path.isdir(args[0]):
        needed.append((args[0], stat.S_IROTH))  # the script an interpreter is given
    return needed


def _shebang(exe: str) -> list[str]:
    try:
        with open(exe, "rb") as fh:
            first = fh.readline(256)
    except OSError:
        return []
    if not first.startswith(b"#!"):
        return []
    return first[2:].decode("utf-8", "replace").split()


def _blocker(target: str, need: int) -> tuple[str, str] | None:
    """The first component of ``target`` (as given, then as the links resolve) an account
    outside its owner and group cannot pass, or None. A missing one is not (nothing to pass
    yet): what is not found or not made is a check of its own."""
    for path in dict.fromkeys((os.path.abspath(target), os.path.realpath(target))):
        parent = os.path.dirname(path)
        ancestors = []
        while True:
            ancestors.append(parent)
            if parent == os.sep:
                break
            parent = os.path.dirname(parent)
        for directory in reversed(ancestors):
            try:
                mode = os.stat(directory).st_mode
            except OSError:  # not made yet: the root's own checks name it
                return None
            if not mode & stat.S_IXOTH:
                return directory, f"mode {stat.S_IMODE(mode):04o}"
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            return path, str(exc.strerror)
        if (mode & need) != need:
            return path, f"mode {stat.S_IMODE(mode):04o}"
    return None


def _run_as(
    argv: list[str], as_other: bool, path: str, timeout: float = PROBE_TIMEOUT_S
) -> subprocess.CompletedProcess[bytes]:
    """``argv`` run as a run would be: as ``nobody`` with no supplementary groups (behind
    ``setpriv`` when installed, as runs are) when ``as_other``, else as ourselves."""
    env = {"PATH": path, "HOME": "/", "LANG": os.environ.get("LANG", "C.UTF-8")}
    setpriv = setpriv_path()
    switch = as_other and setpriv is None  # without setpriv, subprocess switches itself
    if as_other and setpriv is not None:
        argv = [
            setpriv,
            f"--reuid={PROBE_UID}",
            f"--regid={PROBE_GID}",
            "--clear-groups",
            "--",
            *argv,
        ]
    return subprocess.run(
        argv,
        capture_output=True,
        timeout=timeout,
        cwd="/",
        env=env if as_other else None,
        stdin=subprocess.DEVNULL,
        user=PROBE_UID if switch else None,
        group=PROBE_GID if switch else None,
        extra_groups=[] if switch else None,
    )


def _probe_access(target: str, need: int) -> bool:
    """Whether ``nobody`` can use ``target`` as ``need`` says (ACLs, mounts: what modes miss)."""
    if not os.path.exists(target):
        return True  # serve writes it; its directory was checked
    tests = [
        f'test -{flag} "$1"'
        for bit, flag in ((stat.S_IROTH, "r"), (stat.S_IXOTH, "x"))
        if need & bit
    ]
    try:
        proc = _run_as(["/bin/sh", "-c", " && ".join(tests), "sh", target], True, DEFAULT_PATH)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0
