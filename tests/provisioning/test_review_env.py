"""A run's environment never holds the gateway's secrets, "whatever an allowlist says".

The configuration reads ``JAZZ_BRIDGE_*`` names case-insensitively (pydantic-settings,
``case_sensitive=False``), so ``jazz_bridge_telegram__token=...`` configures the bot token;
the deny list that keeps the gateway's variables from a run matches case-sensitively, so
with a broad ``runner.env_passthrough`` (globs are allowed: ``["*"]``) that spelling of the
token reaches the agent's run.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from bridge.config import load_settings
from provisioning.homes import Homes
from provisioning.layout import init_root
from provisioning.sandbox import DEFAULT_ENV_ALLOWLIST, run_identity

TOKEN = "123456:AAE-the-bot-token-of-the-gateway"


def test_a_lower_case_gateway_variable_never_reaches_a_run(tmp_path: Path) -> None:
    gateway_env = {
        "PATH": "/usr/bin:/bin",
        "jazz_bridge_telegram__token": TOKEN,
        "JAZZ_BRIDGE_OPS__TOKEN": "an-ops-token-for-the-review-test",
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
        environ=gateway_env,
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
