"""Helpers of the CLI backend's tests that start real runs: a home of the test's own
account (no isolation, no root needed) and a request for it."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from bridge.runner.base import RunRequest
from provisioning.homes import Home
from provisioning.sandbox import run_identity
from provisioning.system_accounts import Account


def own_home(tmp_path: Path, name: str) -> Home:
    """The home of thread ``web:<name>`` under ``tmp_path``, run as the test's account."""
    path = tmp_path / "home"
    (path / "workspace").mkdir(parents=True)
    me = pwd.getpwuid(os.getuid())
    return Home(
        thread_key=f"web:{name}",
        name=name,
        path=path,
        account=Account(me.pw_name, me.pw_uid, me.pw_gid),
        operator_gid=me.pw_gid,
        isolated=False,
    )


def own_request(tmp_path: Path, name: str, *, timeout_s: float, prompt: str = "hi") -> RunRequest:
    """A run of conversation ``web:<name>#1`` in :func:`own_home`, with our ``PATH``."""
    home = own_home(tmp_path, name)
    return RunRequest(
        home=home,
        identity=run_identity(home, surface="web", environ={"PATH": os.environ["PATH"]}),
        conversation=f"web:{name}#1",
        prompt=prompt,
        agent="default",
        approval_policy="low-risk",
        timeout_s=timeout_s,
    )
