"""The run identity: uid, no supplementary groups, umask, session, allowlisted environment."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from accounts_support import OperatorGroup, needs_root

from provisioning.accounts import AccountRegistry
from provisioning.errors import IsolationUnavailable
from provisioning.homes import Homes
from provisioning.layout import init_root
from provisioning.sandbox import (
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
