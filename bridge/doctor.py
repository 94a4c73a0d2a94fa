"""``jazz-bridge doctor``: every check on its own line, OK or FAIL with the fix.

It only reads: modes and owners of the root, ``chats/`` and each home, accounts against the
uid map, the operator group and its members, the configuration, and the runner serve would
start, checked as a run starts it (isolated: as ``nobody``, no supplementary groups). The
homes are judged by the root's rules, not by who runs doctor (an operator's process cannot
switch users, yet the root's homes are isolated), and the runner is only started when doctor
runs as the gateway's account, since anyone else's start would prove nothing about a run.
Platform checks (credentials valid, webhook registered) belong to the adapters: each enabled
adapter's spec may carry a ``doctor`` coroutine, run here with a timeout, so the core never
imports one.
The configuration is held to the rules ``serve`` starts by (:mod:`.rules`), so doctor
never passes a configuration serve refuses.
"""

from __future__ import annotations

import asyncio
import grp
import json
import os
import pwd
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from provisioning import naming
from provisioning.accounts import USAGE_WARN_AT
from provisioning.layout import Layout
from provisioning.modes import (
    ARCHIVE_DIR_MODE,
    CHATS_MODE,
    HOME_MODE,
    PERSONAS_MODE,
    PRIVATE_DIR_MODE,
    ROOT_MODE,
    STATE_DIR_MODE,
    TOOLS_DIR_MODE,
)
from provisioning.private_proc import proc_hides_other_uids
from provisioning.sandbox import (
    DEFAULT_PATH,
    can_switch_users,
    private_proc_unavailable,
    resolve_isolation,
    setpriv_path,
)
from reference_runner import bundle

from . import rules
from .config import CoreSettings
from .logs import SecretMasker, secret_values
from .ports import AdapterSpec, DoctorCheck
from .runner.cli import reference_copy
from .runner.dialect import CliProfile

PLATFORM_TIMEOUT_S = 30.0
PROBE_UID = PROBE_GID = 65534  # nobody/nogroup: an identity no account, file or group is made for
PROBE_TIMEOUT_S = 20.0
REACH_FIX = (
    "move the runner outside /root and /home, e.g. /usr/local/bin, or make each directory "
    "on its path traversable by others"
)


@dataclass(frozen=True)
class Check:
    ok: bool
    what: str
    fix: str = ""
    warn: bool = False  # passed, with something to look at (``fix`` says what)

    def line(self) -> str:
        if self.warn:
            return f"WARN {self.what} -> {self.fix}"
        return f"{'OK  ' if self.ok else 'FAIL'} {self.what}" + (
            "" if self.ok else f" -> {self.fix}"
        )


def _mode_check(path: Path, want: int, label: str) -> Check:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return Check(False, f"{label} {path} exists", "run jazz-bridge init")
    if stat.S_ISLNK(st.st_mode):
        return Check(
            False,
            f"{label} {path} is not a link",
            f"serve refuses a link there: put the directory itself at {path} (a bind mount "
            "can keep it on another disk)",
        )
    if not stat.S_ISDIR(st.st_mode):
        return Check(
            False, f"{label} {path} is a directory", "move it away, then run jazz-bridge init"
        )
    mode = stat.S_IMODE(st.st_mode)
    return Check(
        mode == want, f"{label} {path} mode {mode:04o} (want {want:04o})", "run jazz-bridge repair"
    )


def config_checks(settings: CoreSettings, specs: dict[str, AdapterSpec]) -> list[Check]:
    """The configuration against the rules serve starts by (:mod:`.rules`): one failed check
    per rule broken, its fix the line serve would refuse to start with."""
    broken = rules.problems(settings, specs)
    masker = SecretMasker(secret_values(settings))
    # sections that stay off for a missing credential: not broken, but most likely meant on
    dormant = [
        Check(True, "configured sections are on", masker.mask(line), warn=True)
        for line in rules.warnings(settings, specs)
    ]
    if not broken:
        return [Check(True, "configuration is valid"), *dormant]
    return [Check(False, "configuration is valid", masker.mask(line)) for line in broken] + dormant


def root_isolated(settings: CoreSettings, layout: Layout) -> bool:
    """Whether the root's homes are isolated (an account each), judged by the root, not by
    this process: an operator (a member of the operator group, not root) runs doctor on the
    root a root gateway made, and its own process switching no users says nothing about
    those homes. As :func:`.cli._operators` takes it: the root's accounts are in its uid
    map. ``off`` is the configuration's word (serve runs single-account, whatever is on disk)
    and ``on`` refuses to start without the means, so only ``auto`` looks at the map."""
    if settings.isolation != "auto":
        return settings.isolation == "on"
    # os.path: an outsider may not look into state/ (Path.exists raises for that)
    return resolve_isolation(settings.isolation) or os.path.exists(layout.uid_map)


TEMPLATE_UNSET = (
    "runner.home_template is not set: the released Jazz CLI fails every run in a new home "
    "with 'No agent found'"
)
MAX_NAMED_LINKS = 5


def home_template_checks(template: Path | None, agent: str, *, released_cli: bool) -> list[Check]:
    """The home template (``runner.home_template``) new homes are seeded from.

    OK when it has ``config.json`` and ``agents/<agent>.json``, both regular files (not
    links) this process can read, ``config.json`` valid JSON; a WARN naming what is missing
    otherwise, and one naming the links and special files in it (never copied). Unset, a
    WARN only when ``released_cli`` (the released CLI cannot run in a home without them).
    """
    if template is None:
        if not released_cli:
            return []
        fix = (
            f"set runner.home_template to a directory with config.json and agents/{agent}.json "
            "(see the README)"
        )
        return [Check(True, TEMPLATE_UNSET, fix, warn=True)]
    what = f"home template {template} has config.json and agents/{agent}.json"
    missing = [
        problem
        for rel, parse in (("config.json", True), (f"agents/{agent}.json", False))
        if (problem := _template_file_problem(template, rel, parse)) is not None
    ]
    checks = [
        Check(
            True,
            what,
            "missing: " + "; ".join(missing) + " (new homes are seeded from it)",
            warn=True,
        )
        if missing
        else Check(True, what)
    ]
    skipped = _template_links(template)
    if skipped:
        shown = ", ".join(skipped[:MAX_NAMED_LINKS]) + (
            f" and {len(skipped) - MAX_NAMED_LINKS} more" if len(skipped) > MAX_NAMED_LINKS else ""
        )
        checks.append(
            Check(
                True,
                f"home template {template} holds only files and directories",
                f"not copied into new homes (links are never followed): {shown}; put the "
                "files themselves there",
                warn=True,
            )
        )
    return checks


def _template_file_problem(template: Path, rel: str, parse: bool) -> str | None:
    """What is wrong with ``template/rel`` as a file a new home needs (None: nothing)."""
    path = template / rel
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return f"{rel} (no such file)"
    except OSError as exc:
        return f"{rel} ({exc.strerror or exc})"
    if stat.S_ISLNK(st.st_mode):
        return f"{rel} (a symbolic link, never copied: put the file itself there)"
    if not stat.S_ISREG(st.st_mode):
        return f"{rel} (not a regular file)"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return f"{rel} (not readable by uid {os.geteuid()}: {exc.strerror or exc})"
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(1024 * 1024 + 1)
    if parse:
        try:
            json.loads(data)
        except ValueError as exc:
            return f"{rel} (not valid JSON: {exc})"
    return None


def _template_links(template: Path) -> list[str]:
    """The links, FIFOs, sockets and devices in ``template`` (relative paths), not followed."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(template, followlinks=False):
        for name in [*dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                found.append(os.path.relpath(path, template))
        if len(found) > 100:
            break
    return sorted(found)


def run_checks(
    settings: CoreSettings, runner_command: list[str], *, profile: CliProfile | None = None
) -> list[Check]:
    """Every check of the root, the homes and the runner. ``profile``: which CLI the runner
    is (:mod:`.runner.dialect`); the released one needs a home template (see
    :func:`home_template_checks`) and a private ``/proc`` for its runs."""
    released_cli = profile is not None and profile.released
    layout = Layout(settings.root.absolute())
    checks = [_mode_check(layout.root, ROOT_MODE, "root")]
    checks.append(_mode_check(layout.chats, CHATS_MODE, "chats"))
    checks.append(_mode_check(layout.personas, PERSONAS_MODE, "personas"))
    # the rest of the root as serve takes it: a link or a file there and it will not start
    checks.append(_mode_check(layout.state, STATE_DIR_MODE, "state"))
    for path, want, label in (
        (layout.archive, ARCHIVE_DIR_MODE, "archive"),
        (layout.tools, TOOLS_DIR_MODE, "tools"),
    ):
        if os.path.lexists(path):  # else serve makes it
            checks.append(_mode_check(path, want, label))
    try:
        gid = os.lstat(layout.root).st_gid
        group = grp.getgrgid(gid)
        members = ", ".join(group.gr_mem) or "no members"
        checks.append(Check(True, f"operator group {group.gr_name} ({members})"))
    except (OSError, KeyError):
        checks.append(
            Check(
                False,
                "operator group exists",
                "create it (groupadd) and run jazz-bridge init --operator-group",
            )
        )
        gid = -1
    isolated = root_isolated(settings, layout)
    try:
        entries = os.listdir(layout.chats)
    except PermissionError:
        # chats/ is listable by the gateway and its operators only: every home unseen here
        # is a home not checked, which must not pass as all well
        entries = []
        checks.append(Check(False, f"homes in {layout.chats} readable", _outsider_fix(gid)))
    except OSError:
        entries = []  # missing: the chats check above says so
    homes = sorted(e for e in entries if naming.is_home_name(e))
    accounts: dict[str, dict[str, object]] = {}
    try:
        accounts = _uid_map_entries(json.loads(layout.uid_map.read_text()))
    except PermissionError:
        pass  # an outsider: named by the check above
    except (OSError, ValueError):
        if isolated and entries:
            checks.append(
                Check(
                    False,
                    f"uid map {layout.uid_map} readable",
                    "jazz-bridge repair rebuilds it from the homes",
                )
            )
    if isolated and accounts:
        checks.append(uid_range_check(settings, accounts))
    for name in homes:
        path = layout.chats / name
        st = os.lstat(path)
        mode = stat.S_IMODE(st.st_mode)
        if isolated:
            entry = accounts.get(name)
            uid = entry.get("uid") if entry else None
            acct = str(entry.get("name")) if entry else "?"
            try:
                exists = pwd.getpwnam(acct).pw_uid == uid
            except KeyError:
                exists = False
            checks.append(
                Check(
                    exists,
                    f"account {acct} of {name} exists with uid {uid}",
                    "run jazz-bridge repair (or restart the gateway): it recreates accounts "
                    "lost from /etc/passwd",
                )
            )
            good = mode == HOME_MODE and st.st_uid == uid and st.st_gid == gid
            checks.append(
                Check(
                    good,
                    f"home {name} {mode:04o} {st.st_uid}:{st.st_gid} "
                    f"(want {HOME_MODE:04o} {uid}:{gid})",
                    "run jazz-bridge repair",
                )
            )
        else:
            checks.append(
                Check(
                    mode == PRIVATE_DIR_MODE,
                    f"home {name} mode {mode:04o} (want {PRIVATE_DIR_MODE:04o})",
                    "run jazz-bridge repair",
                )
            )
    checks += home_template_checks(
        settings.runner.home_template, settings.runner.agent, released_cli=released_cli
    )
    checks += runner_checks(settings, runner_command, isolated)
    return checks + (cli_checks(settings, profile, isolated) if profile is not None else [])


def uid_range_check(settings: CoreSettings, accounts: dict[str, dict[str, object]]) -> Check:
    """How much of accounts.uid_min..uid_max conversation accounts hold: a WARN from 80%
    (accounts are kept, archived conversations' too; when all are taken no new
    conversation can start)."""
    lo, hi = settings.accounts.uid_min, settings.accounts.uid_max
    uids = [e.get("uid") for e in accounts.values()]
    used = sum(1 for u in uids if isinstance(u, int) and lo <= u <= hi)
    capacity = hi - lo + 1
    share = used / capacity
    return Check(
        True,
        f"uid range {lo}-{hi}: {used} of {capacity} held by conversations ({share:.0%})",
        "widen accounts.uid_min..uid_max into uids no other account uses before it is full",
        warn=share >= USAGE_WARN_AT[0],
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


def _outsider_fix(gid: int) -> str:
    try:
        group = grp.getgrgid(gid).gr_name
    except (KeyError, OverflowError):
        group = str(gid)
    return (
        f"doctor runs as uid {os.geteuid()}, which may not read them: run it as the gateway's "
        f"account or as a member of the operator group {group} (usermod -aG {group} $USER, "
        f"then log in again or run newgrp {group})"
    )


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
    :func:`.runner.cli.default_command`), which serve writes (doctor only reads)."""
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


async def _platform(spec: AdapterSpec, section: object, timeout_s: float) -> list[Check]:
    assert spec.doctor is not None
    try:
        found: list[DoctorCheck] = await asyncio.wait_for(spec.doctor(section), timeout_s)
    except TimeoutError:
        return [
            Check(
                False,
                f"{spec.name} checks finished within {timeout_s:g}s",
                f"check the network and {spec.section}.api_url",
            )
        ]
    except Exception as exc:  # an adapter's check must not stop the others
        return [
            Check(
                False,
                f"{spec.name} checks ran ({type(exc).__name__}: {exc})",
                f"check [{spec.section}] in the configuration",
            )
        ]
    return [Check(c.ok, c.what, c.fix) for c in found]


async def platform_checks(
    settings: CoreSettings,
    specs: dict[str, AdapterSpec],
    timeout_s: float = PLATFORM_TIMEOUT_S,
) -> list[Check]:
    """Every enabled adapter's own checks, concurrently, each bounded by ``timeout_s``.

    Whatever an adapter reports is passed through the log's secret masker: a token inside
    an error message or a URL never reaches the output.
    """
    jobs = [
        _platform(spec, section_settings, timeout_s)
        for spec, section_settings in rules.enabled_adapters(settings, specs)
        if spec.doctor is not None
    ]
    masker = SecretMasker(secret_values(settings))
    return [
        Check(c.ok, masker.mask(c.what), masker.mask(c.fix))
        for found in await asyncio.gather(*jobs)
        for c in found
    ]


def _uid_map_entries(data: object) -> dict[str, dict[str, object]]:
    """The uid map's entries (home name -> its account), or ValueError when the file is
    JSON of another shape (a list, an entry that is not a table): reported, not a crash."""
    accounts = data.get("accounts") if isinstance(data, dict) else None
    if not isinstance(accounts, dict) or not all(isinstance(e, dict) for e in accounts.values()):
        raise ValueError('not a uid map ({"accounts": {home: {...}}})')
    return accounts
