"""Review: a run inherits no descriptor of the gateway's but its three pipes.

``RunIdentity.popen_kwargs`` passes the run's working directory as a descriptor
(``pass_fds=(workdir_fd,)``) so that the child can enter it before it switches identity; but
``pass_fds`` also makes that descriptor survive ``exec``: the runner, and everything it
starts (every tool, every daemon it leaves behind, through the single-account reaper too),
holds a directory descriptor the gateway (root, when isolated) opened. The run needs none.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import socket
import sqlite3
import sys
from pathlib import Path

from bridge.runner.base import RunRequest
from bridge.runner.cli import CliRunner
from provisioning.accounts import Account
from provisioning.homes import Home
from provisioning.sandbox import run_identity

BOUND_S = 20

RUNNER = r"""
import json, os, sys
sys.stdin.readline()
fds = {}
for n in sorted(os.listdir("/proc/self/fd"), key=int):
    try:
        fds[n] = os.readlink("/proc/self/fd/" + n)
    except OSError:
        continue  # the descriptor listdir itself used
print(json.dumps({"ok": True, "answer": json.dumps(fds)}))
"""


def home(tmp_path: Path) -> Home:
    path = tmp_path / "home"
    (path / "workspace").mkdir(parents=True)
    me = pwd.getpwuid(os.getuid())
    return Home(
        thread_key="web:fds",
        name="fds",
        path=path,
        account=Account(me.pw_name, me.pw_uid, me.pw_gid),
        operator_gid=me.pw_gid,
        isolated=False,
    )


async def test_a_run_holds_only_stdin_stdout_and_stderr(tmp_path: Path) -> None:
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    runner = CliRunner([sys.executable, str(script)], kill_grace_s=0.5)
    h = home(tmp_path)
    # what a gateway holds open while it starts runs: its database, its listening socket
    db = sqlite3.connect(str(tmp_path / "bridge.db"))
    db.execute("create table t (x)")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        request = RunRequest(
            home=h,
            identity=run_identity(h, surface="web", environ={"PATH": os.environ["PATH"]}),
            conversation="web:fds#1",
            prompt="hi",
            agent="default",
            approval_policy="low-risk",
            timeout_s=10,
        )
        handle = await asyncio.wait_for(runner.start(request), BOUND_S)

        async def drain() -> None:
            async for _ in handle.events():
                pass

        await asyncio.wait_for(drain(), BOUND_S)
        result = await asyncio.wait_for(handle.wait(), BOUND_S)
        await asyncio.wait_for(handle.settled(), BOUND_S)
        await runner.close()
    finally:
        db.close()
        listener.close()
    assert result.ok, result
    fds = json.loads(result.answer)
    print("\nthe run's descriptors:", fds)
    assert set(fds) == {"0", "1", "2"}, f"the run inherited descriptors: {fds}"
