"""The run identity: uid, no supplementary groups, umask, session, allowlisted environment,
and the working directory a run starts in."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from accounts_support import OperatorGroup, needs_root
from home_support import NOBODY, REPO, as_nobody, as_uid

from bridge.config import load_settings
from provisioning.accounts import AccountRegistry
from provisioning.errors import IsolationUnavailable
from provisioning.homes import Homes
from provisioning.layout import init_root
from provisioning.sandbox import (
    DEFAULT_ENV_ALLOWLIST,
    RunIdentity,
    build_env,
    probe_env,
    resolve_isolation,
    run_identity,
    setpriv_path,
)

PROBE = (
    "id -u; id -g; id -G; umask; ps -o sid= -p $$; echo $$;"
    " grep '^NoNewPrivs:' /proc/self/status | cut -f2"
)

GATEWAY_ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "OPENAI_API_KEY": "sk-provider",
    "JAZZ_BRIDGE_SLACK__BOT_TOKEN": "xoxb-secret",
    "SLACK_SIGNING_SECRET": "sig-secret",
    "TELEGRAM_TOKEN": "123:tg",
    "MY_WEBHOOK_SECRET": "hook",
    "AWS_SECRET_ACCESS_KEY": "aws",
    "HOME": "/root",
    "RANDOM_THING": "x",
}


def _probe(ident: RunIdentity) -> list[str]:
    proc = subprocess.run(
        ident.command(["sh", "-c", PROBE]),
        capture_output=True,
        text=True,
        check=True,
        timeout=20,
        **ident.popen_kwargs(),
    )
    return proc.stdout.split("\n")


@needs_root
@pytest.mark.parametrize("use_setpriv", [True, False], ids=["setpriv", "subprocess"])
def test_isolated_run_is_the_conversation_with_no_groups_and_umask_027(
    shared_root: Path,
    operator_group: OperatorGroup,
    uid_range: tuple[int, int],
    use_setpriv: bool,
) -> None:
    info = init_root(shared_root, operator_group.name)
    homes = Homes(
        info, isolated=True, registry=AccountRegistry(info.layout, info.operator_gid, uid_range)
    )
    home = homes.ensure("web:probe")
    ident = run_identity(home, surface="web", environ=GATEWAY_ENV, use_setpriv=use_setpriv)
    if use_setpriv:
        if setpriv_path() is None:
            pytest.skip("setpriv (util-linux) is not installed")
        assert ident.command(["x"])[0] == setpriv_path()
        assert "user" not in ident.popen_kwargs()  # vfork stays possible
    else:
        assert ident.command(["x"]) == ["x"]
    uid, gid, groups, umask, sid, pid, no_new_privs = _probe(ident)[:7]
    assert int(uid) == home.account.uid
    assert int(gid) == home.account.gid
    assert groups.split() == [str(home.account.gid)]  # no supplementary groups, not O, not root
    assert umask == "0027"
    assert sid.strip() == pid  # its own session
    if use_setpriv:  # no setuid program it starts gains a privilege (sudo, su)
        assert no_new_privs == "1"
    env = ident.env
    assert env["HOME"] == str(home.path)
    assert env["TMPDIR"] == f"{home.path}/tmp"
    assert env["GNUPGHOME"] == f"{home.path}/gnupg"
    assert env["XDG_CONFIG_HOME"] == f"{home.path}/xdg-config"
    assert env["JAZZ_HOME"] == str(home.path)


def test_environment_is_an_allowlist_without_secrets(tmp_path: Path) -> None:
    info = init_root(tmp_path / "r")
    home = Homes(info, isolated=False).ensure("web:env")
    env = build_env(home, surface="telegram", environ=GATEWAY_ENV, extra={"SLACK_BOT_TOKEN": "x"})
    assert env["OPENAI_API_KEY"] == "sk-provider"
    assert env["JAZZ_SURFACE"] == "telegram"
    assert env["PATH"] == "/usr/bin:/bin"
    for leaked in ("xoxb-secret", "sig-secret", "123:tg", "hook"):
        assert leaked not in env.values()
    assert "SLACK_BOT_TOKEN" not in env
    assert "RANDOM_THING" not in env
    assert "JAZZ_BRIDGE_SLACK__BOT_TOKEN" not in env


TOKEN = "123456:AAE-the-bot-token-of-the-gateway"


def test_a_lower_case_gateway_variable_never_reaches_a_run(tmp_path: Path) -> None:
    """A run's environment never holds the gateway's secrets, "whatever an allowlist says".

    The configuration reads ``JAZZ_BRIDGE_*`` names case-insensitively (pydantic-settings,
    ``case_sensitive=False``), so ``jazz_bridge_telegram__token=...`` configures the bot
    token; the deny list that kept the gateway's variables from a run matched
    case-sensitively, so with a broad ``runner.env_passthrough`` (globs are allowed:
    ``["*"]``) that spelling of the token reached the agent's run."""
    environ = {
        "PATH": "/usr/bin:/bin",
        "jazz_bridge_telegram__token": TOKEN,
        "JAZZ_BRIDGE_OPS__TOKEN": "an-ops-token-for-the-env-test",
    }
    # the gateway does take it as its configuration: it is the ops token here
    settings = load_settings(
        None, environ={"PATH": "/usr/bin:/bin", "jazz_bridge_ops__token": TOKEN}
    )
    assert settings.ops.token is not None and settings.ops.token.get_secret_value() == TOKEN

    info = init_root(tmp_path / "r")
    home = Homes(info, isolated=False).ensure("web:env")
    identity = run_identity(
        home,
        surface="web",
        environ=environ,
        allowlist=(*DEFAULT_ENV_ALLOWLIST, "*"),  # runner.env_passthrough = ["*"]
    )
    workdir = identity.open_workdir()
    try:
        done = subprocess.run(
            identity.command(["/usr/bin/env"]),
            capture_output=True,
            text=True,
            timeout=30,
            **identity.popen_kwargs(workdir),
        )
    finally:
        os.close(workdir)
    assert done.returncode == 0, done.stderr
    assert "JAZZ_BRIDGE_OPS__TOKEN" not in done.stdout  # the upper-case name is kept out
    assert TOKEN not in done.stdout, [line for line in done.stdout.splitlines() if TOKEN in line]


# what the released Jazz CLI (0.14.2) reads besides the long-known providers
RELEASED_CLI_ENV = {
    "LLAMACPP_BASE_URL": "http://127.0.0.1:8080",
    "LLAMACPP_API_KEY": "ll",
    "MOONSHOT_API_KEY": "ms",
    "TOGETHER_AI_API_KEY": "tg-ai",
    "FIREWORKS_API_KEY": "fw",
    "CEREBRAS_API_KEY": "cb",
    "ZHIPU_API_KEY": "zp",
    "ALIBABA_API_KEY": "al",
    "MINIMAX_API_KEY": "mm",
    "AI_GATEWAY_API_KEY": "ag",
    "BRAVE_API_KEY": "br",
    "EXA_API_KEY": "ex",
    "LINKUP_API_KEY": "lk",
    "PARALLEL_API_KEY": "pl",
    "PERPLEXITY_API_KEY": "px",
    "TAVILY_API_KEY": "tv",
    "JAZZ_CONFIG_PATH": "/etc/jazz/config.json",
    "JAZZ_OFFLINE": "1",
}


def test_the_released_clis_provider_variables_reach_a_run_and_probe(tmp_path: Path) -> None:
    info = init_root(tmp_path / "r")
    home = Homes(info, isolated=False).ensure("web:released-env")
    gateway = {**GATEWAY_ENV, **RELEASED_CLI_ENV}
    for env in (build_env(home, surface="web", environ=gateway), probe_env(environ=gateway)):
        assert {k: env.get(k) for k in RELEASED_CLI_ENV} == RELEASED_CLI_ENV
        assert "JAZZ_BRIDGE_SLACK__BOT_TOKEN" not in env and "SLACK_BOT_TOKEN" not in env
        assert "RANDOM_THING" not in env


def test_single_account_run_keeps_our_identity_and_umask_077(tmp_path: Path) -> None:
    info = init_root(tmp_path / "r")
    home = Homes(info, isolated=False).ensure("web:me")
    ident = run_identity(home, surface="web", environ=GATEWAY_ENV)
    assert ident.command(["x"]) == ["x"]
    uid, _gid, _groups, umask = _probe(ident)[:4]
    assert int(uid) == os.geteuid()
    assert umask == "0077"


def test_isolation_modes() -> None:
    assert resolve_isolation("off") is False
    if os.geteuid() == 0:
        assert resolve_isolation("auto") is True
        assert resolve_isolation("on") is True
    else:
        assert resolve_isolation("auto") is False
        with pytest.raises(IsolationUnavailable, match="needs root"):
            resolve_isolation("on")


@needs_root
def test_isolation_on_without_root_is_refused(nobody_dir: Path) -> None:
    out = as_nobody(
        sys.executable,
        "-m",
        "bridge.cli",
        "homes",
        "ensure",
        "web:x",
        "--root",
        str(nobody_dir / "root"),
        cwd=nobody_dir,
    )
    assert out.returncode == 0
    env_on = as_uid(
        NOBODY,
        NOBODY,
        sys.executable,
        "-m",
        "bridge.cli",
        "homes",
        "ensure",
        "web:x",
        "--root",
        str(nobody_dir / "root"),
        cwd=nobody_dir,
        env={"PATH": "/usr/bin:/bin", "JAZZ_BRIDGE_ISOLATION": "on"},
    )
    assert env_on.returncode == 2
    assert "needs root" in env_on.stderr


# A run's working directory is entered through /proc/self/fd/N, never /proc/<gateway pid>/fd/N:
# the child is a different process, so the kernel checks whether it may look at the
# gateway's descriptors (a ptrace "read" check: the gateway must be dumpable, or the child
# needs CAP_SYS_PTRACE, which the systemd unit drops), and the pid is only right when /proc
# belongs to the gateway's pid namespace. /proc/self/fd/N works in both cases: the child
# still holds the (close-on-exec) descriptor when it changes directory, before exec closes
# it. Each case runs a small gateway in its own process and starts ``pwd -P`` the way
# ``bridge/runner/cli.py`` starts a run: ``open_workdir`` then ``popen_kwargs(workdir)``.

CWD_GATEWAY = r"""
import ctypes, os, subprocess, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from provisioning.homes import Homes
from provisioning.layout import init_root
from provisioning.sandbox import run_identity

if sys.argv[2] == "not-dumpable":
    # what a gateway started with file capabilities (AT_SECURE), from an execute-only
    # interpreter, or after a credential change is: not dumpable
    assert ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE
info = init_root(Path(sys.argv[1]))
home = Homes(info, isolated=False).ensure("web:cwd-probe")
ident = run_identity(home, surface="web", environ={"PATH": "/usr/bin:/bin"})
fd = ident.open_workdir()
try:
    kwargs = ident.popen_kwargs(fd)
    proc = subprocess.run(
        ident.command(["pwd", "-P"]), capture_output=True, text=True, timeout=20, **kwargs
    )
    print("CWD", proc.stdout.strip())
except OSError as exc:
    print("START-FAILED", kwargs["cwd"], exc)
finally:
    os.close(fd)
print("WANT", os.path.realpath(home.path / "workspace"))
"""


def _gateway(argv_prefix: list[str], root: Path, case: str, cwd: Path) -> tuple[str, str]:
    proc = subprocess.run(
        [*argv_prefix, sys.executable, "-c", CWD_GATEWAY, str(root), case, str(REPO)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    want = next(line[5:] for line in lines if line.startswith("WANT "))
    got = next(line for line in lines if line.startswith(("CWD ", "START-FAILED ")))
    return got, want


@needs_root
def test_a_single_account_gateway_that_is_not_dumpable_still_starts_runs_in_the_workspace(
    nobody_dir: Path,
) -> None:
    """Single-account mode (the gateway is nobody, its runs are nobody): a gateway that is
    not dumpable. Its child (same uid, no CAP_SYS_PTRACE) may not follow the gateway's
    /proc/<pid>/fd/N, so every run fails to start ("Permission denied", reported by the
    runner as "check runner.command")."""
    nobody = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", "--"]
    got, want = _gateway(nobody, nobody_dir / "root", "not-dumpable", nobody_dir)
    assert got == f"CWD {want}"


@needs_root
def test_a_gateway_in_its_own_pid_namespace_starts_runs_in_the_workspace(tmp_path: Path) -> None:
    """A gateway in a pid namespace of its own that sees the host's /proc (``unshare
    --pid --fork`` without remounting /proc; some sandboxes and CI runners): its pid is 1
    there, and /proc/1 is another process (the host's init), whose fd N is not the
    workspace. /proc/self is right in every namespace."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    check = subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True, timeout=30)
    if check.returncode != 0:
        pytest.skip(f"cannot make a pid namespace here: {check.stderr[-200:]!r}")
    got, want = _gateway(["unshare", "--pid", "--fork", "--"], tmp_path / "root", "plain", tmp_path)
    assert got == f"CWD {want}"
