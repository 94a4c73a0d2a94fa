"""How a runner process starts for a home: its identity, umask, session and environment.

One helper builds all of it so every backend starts runs the same way: isolated, the
conversation's uid and private gid with *no* supplementary groups (``user=`` alone keeps
root's groups; ``setpriv --clear-groups`` when installed, see :class:`RunIdentity`),
umask 027, its own session and process group; single-account, the gateway's identity with
umask 077. The environment is built from an allowlist, never a
copy of the gateway's: the bot token, signing secret and webhook secret can't reach a run.
"""

from __future__ import annotations

import fnmatch
import functools
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from . import pinned
from . import private_proc as pidns
from .errors import IsolationUnavailable, UnsafePathError
from .homes import Home
from .modes import ISOLATED_UMASK, PRIVATE_UMASK
from .rlimits import RunLimits

log = logging.getLogger(__name__)

IsolationMode = Literal["auto", "on", "off"]

# Names passed through from the gateway's environment when set (globs allowed).
DEFAULT_ENV_ALLOWLIST: tuple[str, ...] = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    # model providers Jazz reads
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "GOOGLE_GENERATIVE_AI_API_KEY",
    "GEMINI_API_KEY",
    "MISTRAL_API_KEY",
    "GROQ_API_KEY",
    "XAI_API_KEY",
    "DEEPSEEK_API_KEY",
    "OPENROUTER_API_KEY",
    "OLLAMA_HOST",
    "OLLAMA_BASE_URL",
    "AZURE_OPENAI_*",
    "AWS_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    # the released CLI's (0.14.2) other providers and its web-search tools
    "LLAMACPP_*",
    "MOONSHOT*",
    "TOGETHER_AI*",
    "FIREWORKS*",
    "CEREBRAS*",
    "ZHIPU*",
    "ALIBABA*",
    "MINIMAX*",
    "AI_GATEWAY*",
    "BRAVE_API_KEY",
    "EXA_API_KEY",
    "LINKUP_API_KEY",
    "PARALLEL_API_KEY",
    "PERPLEXITY_API_KEY",
    "TAVILY_API_KEY",
    # Jazz's own switches
    "JAZZ_NO_TUI",
    "JAZZ_DISABLE_UPDATE_CHECK",
    "JAZZ_DISABLE_CATCH_UP",
    "JAZZ_DISABLE_KEYRING",
    "JAZZ_CONFIG_PATH",
    "JAZZ_OFFLINE",
    "JAZZ_MODELS_DEV_URL",
    "JAZZ_LOG_LEVEL",
)

# Never passed, whatever an allowlist says: the gateway's own configuration and secrets.
# Matched ignoring case: the configuration reads JAZZ_BRIDGE_* names case-insensitively
# (``jazz_bridge_telegram__token`` sets the bot token), so any spelling is a secret.
ENV_DENYLIST: tuple[str, ...] = (
    "JAZZ_BRIDGE_*",
    "SLACK_*",
    "TELEGRAM_*",
    "*_BOT_TOKEN",
    "*SIGNING_SECRET*",
    "*WEBHOOK_SECRET*",
    "JAZZ_DAEMON_TOKEN",
    "JAZZ_OPERATOR_TOKEN",
)

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
CAP_SETGID = 6
CAP_SETUID = 7


def can_switch_users() -> bool:
    """True when this process may become another uid/gid (root with CAP_SETUID/SETGID)."""
    if os.geteuid() != 0:
        return False
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("CapEff:"):
                    caps = int(line.split()[1], 16)
                    return bool(caps & (1 << CAP_SETUID)) and bool(caps & (1 << CAP_SETGID))
    except OSError:
        pass
    return True


def resolve_isolation(mode: IsolationMode) -> bool:
    """``auto`` isolates when possible; ``on`` refuses to start without the means to."""
    if mode == "off":
        return False
    able = can_switch_users()
    if mode == "on" and not able:
        raise IsolationUnavailable(
            'isolation = "on" needs root with CAP_SETUID and CAP_SETGID to run each '
            "conversation as its own account; run the gateway as root or set isolation to "
            '"auto" or "off"'
        )
    return able


@functools.lru_cache(maxsize=64)
def _matcher(patterns: tuple[str, ...], *, ignore_case: bool = False) -> Callable[[str], bool]:
    """One compiled regular expression for a list of globs (built once per list, not per run).

    The allowlist matches names exactly as written (``http_proxy`` and ``HTTP_PROXY`` are
    both listed on purpose); the deny list ignores case (see :data:`ENV_DENYLIST`).
    """
    if not patterns:
        return lambda name: False
    flags = re.IGNORECASE if ignore_case else 0
    regex = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns), flags)
    return lambda name: regex.match(name) is not None


def build_env(
    home: Home,
    *,
    surface: str,
    environ: Mapping[str, str] | None = None,
    allowlist: Iterable[str] = DEFAULT_ENV_ALLOWLIST,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The runner's environment: allowlisted names, then the home's own paths."""
    source = os.environ if environ is None else environ
    allowed = _matcher(tuple(allowlist))
    denied = _matcher(ENV_DENYLIST, ignore_case=True)
    env = {name: value for name, value in source.items() if allowed(name) and not denied(name)}
    env.setdefault("PATH", DEFAULT_PATH)
    for name, value in (extra or {}).items():
        if not denied(name):
            env[name] = value
    path = str(home.path)
    env["JAZZ_HOME"] = path
    env["JAZZ_SURFACE"] = surface
    env["JAZZ_NO_TUI"] = "1"
    env["JAZZ_DISABLE_UPDATE_CHECK"] = "1"
    if home.isolated:
        env.update(
            HOME=path,
            USER=home.account.name,
            LOGNAME=home.account.name,
            XDG_CONFIG_HOME=f"{path}/xdg-config",
            XDG_DATA_HOME=f"{path}/xdg-data",
            XDG_STATE_HOME=f"{path}/xdg-state",
            XDG_CACHE_HOME=f"{path}/xdg-cache",
            GNUPGHOME=f"{path}/gnupg",
            PASSWORD_STORE_DIR=f"{path}/password-store",
            TMPDIR=f"{path}/tmp",
        )
    else:
        for name in ("HOME", "USER", "LOGNAME"):
            if name in source:
                env[name] = source[name]
        env["TMPDIR"] = f"{path}/tmp"
    return env


def probe_env(
    *,
    environ: Mapping[str, str] | None = None,
    allowlist: Iterable[str] = DEFAULT_ENV_ALLOWLIST,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment to ask a runner about itself (``run --help``) in: a run's, without a
    home; never the gateway's secrets."""
    source = os.environ if environ is None else environ
    allowed = _matcher(tuple(allowlist))
    denied = _matcher(ENV_DENYLIST, ignore_case=True)
    env = {name: value for name, value in source.items() if allowed(name) and not denied(name)}
    env.setdefault("PATH", DEFAULT_PATH)
    env.update({k: v for k, v in (extra or {}).items() if not denied(k)})
    env.update(JAZZ_NO_TUI="1", JAZZ_DISABLE_UPDATE_CHECK="1")
    return env


PR_SET_DUMPABLE = 4


@functools.lru_cache(maxsize=1)
def hide_from_own_account() -> bool:
    """Make this process (the gateway) not dumpable, once; whether that was done.

    A run of the gateway's own account (single-account mode) shares its uid, and a process
    may read the ``/proc/<pid>/environ`` (and memory) of every dumpable process of its uid:
    the bot token in the gateway's environment would reach every run's agent. Not dumpable,
    those files are root's. Runs are unaffected (``exec`` makes a process dumpable again),
    and the gateway still reads its own ``/proc/self/fd`` (see :meth:`RunIdentity.popen_kwargs`).
    A debugger of the same uid can no longer attach; root's still can.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        done = int(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        done = False
    if not done:
        log.warning(
            "could not make the gateway undumpable: runs of its own account can read its "
            "environment in /proc"
        )
    return done


SETPRIV_CANDIDATES = ("/usr/bin/setpriv", "/bin/setpriv", "/usr/sbin/setpriv")


@functools.lru_cache(maxsize=1)
def setpriv_path() -> str | None:
    """util-linux ``setpriv`` when installed (checked once): how isolated runs switch identity."""
    for candidate in SETPRIV_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    return None


@dataclass(frozen=True)
class RunIdentity:
    """Everything ``subprocess``/``asyncio`` need to start a run as a home's account.

    Use both halves: ``command(argv)`` and ``popen_kwargs()``. An isolated run switches
    identity through ``setpriv --reuid U --regid G --clear-groups --`` (the runner
    contract's own form) when ``setpriv`` is installed: CPython spawns with ``vfork`` only
    when it is not asked to change uid, gid or groups itself, and a ``fork`` of a large
    gateway freezes its event loop for milliseconds per run. Without ``setpriv`` the same
    identity is set by ``subprocess`` (``user=``, ``group=``, ``extra_groups=[]``).
    """

    home: Home
    env: dict[str, str]
    umask: int
    uid: int | None = None
    gid: int | None = None
    cwd: str = field(default="")
    setpriv: str | None = None
    # the run starts in its own PID namespace with a private /proc (see private_proc)
    private_proc: bool = False
    # what the run may use (provisioning/rlimits.py), already fitted to its account
    limits: RunLimits = field(default_factory=RunLimits)

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` as it must be executed: behind ``setpriv`` when that switches identity,
        then in its own PID namespace when :attr:`private_proc` is set. Its limits are set
        at the gate in front of it (:mod:`provisioning.gate`), not on its command line."""
        if self.private_proc:
            argv = pidns.wrap(argv)
        if self.uid is not None and self.setpriv is not None:
            return [
                self.setpriv,
                f"--reuid={self.uid}",
                f"--regid={self.gid}",
                "--clear-groups",
                # no set-user-ID program the run starts gains a privilege (sudo, su, a
                # setuid binary in the home's reach): as the systemd unit's NoNewPrivileges,
                # for a gateway started without it (serve.sh as root)
                "--no-new-privs",
                "--",
                *argv,
            ]
        return list(argv)

    def open_workdir(self) -> int:
        """The run's working directory, opened without following a link (the caller closes it).

        The conversation owns its home, so it can replace ``workspace`` with a symbolic
        link, and the child enters its working directory *before* it becomes the
        conversation's account (root, or ``setpriv`` later): a path would take a run into
        any directory root can reach. So the directory is opened here, refusing links, and
        the child enters it through the descriptor (:meth:`popen_kwargs`). A workspace that
        is a link or no directory: the run starts in the home itself, which only the
        gateway can replace (``chats/`` is not the conversation's), and that is logged.
        """
        home_fd = pinned.open_dir(self.home.path)
        wanted = os.path.relpath(self.cwd, self.home.path) if self.cwd else os.curdir
        fd = home_fd
        try:
            for part in [] if wanted == os.curdir else wanted.split(os.sep):
                inner = pinned.open_dir(part, dir_fd=fd)  # one component at a time, no links
                if fd != home_fd:
                    os.close(fd)
                fd = inner
        except (UnsafePathError, FileNotFoundError):
            log.warning(
                "%s is a symbolic link or no directory (the conversation's doing): the run "
                "starts in %s instead",
                self.cwd,
                self.home.path,
            )
            if fd != home_fd:
                os.close(fd)
            return home_fd
        if fd != home_fd:
            os.close(home_fd)
        return fd

    def popen_kwargs(self, workdir_fd: int | None = None) -> dict[str, Any]:
        """Keyword arguments for ``subprocess.Popen`` / ``asyncio.create_subprocess_exec``.

        With ``workdir_fd`` (from :meth:`open_workdir`) the child enters that very
        directory through its own copy of the descriptor (``/proc/self/fd/N``: the child
        changes directory before it closes descriptors, and the copy is close-on-exec, so
        the run holds nothing but its three pipes). Not ``/proc/<our pid>/fd/N``: reading
        another process's descriptors needs it dumpable and in our PID namespace's /proc.
        Without, ``cwd`` by path, for callers that trust it.
        """
        kwargs: dict[str, Any] = {
            "env": self.env,
            "umask": self.umask,
            "start_new_session": True,  # own session and process group: killable as a whole
            "cwd": self.cwd or str(self.home.path),
            "close_fds": True,
        }
        if workdir_fd is not None:
            kwargs.update(cwd=f"/proc/self/fd/{workdir_fd}")
        if self.uid is not None and self.setpriv is None:
            kwargs.update(user=self.uid, group=self.gid, extra_groups=[])
        return kwargs


def run_identity(
    home: Home,
    *,
    surface: str,
    environ: Mapping[str, str] | None = None,
    allowlist: Iterable[str] = DEFAULT_ENV_ALLOWLIST,
    extra_env: Mapping[str, str] | None = None,
    use_setpriv: bool = True,
    private_proc: bool = False,
    limits: RunLimits | None = None,
) -> RunIdentity:
    """How a runner starts for ``home`` (see the module docstring); ``private_proc``: in
    a PID namespace of its own (only where :func:`private_proc_unavailable` says None);
    ``limits``: what the run may use (the process cap only for a home's own account)."""
    fitted = (limits or RunLimits()).for_account(home.isolated)
    env = build_env(home, surface=surface, environ=environ, allowlist=allowlist, extra=extra_env)
    workspace = f"{home.path}/workspace"
    if home.isolated:
        return RunIdentity(
            home=home,
            env=env,
            umask=ISOLATED_UMASK,
            uid=home.account.uid,
            gid=home.account.gid,
            cwd=workspace,
            setpriv=setpriv_path() if use_setpriv else None,
            private_proc=private_proc,
            limits=fitted,
        )
    return RunIdentity(
        home=home,
        env=env,
        umask=PRIVATE_UMASK,
        cwd=workspace,
        private_proc=private_proc,
        limits=fitted,
    )


PROBE_ACCOUNT = 65534  # nobody: an unprivileged uid and gid to probe as


def private_proc_unavailable(isolated: bool) -> str | None:
    """Why runs cannot start in a PID namespace of their own here, or None when they can.

    Isolated, the probe switches to an unprivileged account the way a run does (root may
    be allowed user namespaces where accounts are not); single-account, it is ours.
    """
    prefix: tuple[str, ...] = ()
    setpriv = setpriv_path()
    if isolated and setpriv is not None:
        prefix = (
            setpriv,
            f"--reuid={PROBE_ACCOUNT}",
            f"--regid={PROBE_ACCOUNT}",
            "--clear-groups",
            "--no-new-privs",
            "--",
        )
    return pidns.unavailable_reason(prefix)
