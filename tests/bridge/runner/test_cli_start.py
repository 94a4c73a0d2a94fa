"""What a run the CLI backend starts (``bridge.runner.cli``) holds of the gateway: no
descriptor but its three pipes, and no way to read the gateway's environment.

Descriptors: ``RunIdentity.popen_kwargs`` passes the run's working directory as a
descriptor (``pass_fds=(workdir_fd,)``) so that the child can enter it before it switches
identity; but ``pass_fds`` also makes that descriptor survive ``exec``: the runner, and
everything it starts (every tool, every daemon it leaves behind, through the
single-account reaper too), would hold a directory descriptor the gateway (root, when
isolated) opened. The run needs none.

Environment: a run of the gateway's own account (not root, or isolation off) could read
the gateway's secrets from ``/proc/<gateway pid>/environ``. The run's environment is built
from an allowlist, but the gateway's own environment (the bot token in
``JAZZ_BRIDGE_TELEGRAM__TOKEN``, as a container or a systemd ``EnvironmentFile`` gives
it) stays readable there by every process of the same uid, and the agent runs shell
commands as that uid. A gateway that starts such runs is not dumpable: its
``/proc/<pid>/environ`` (and its memory) is then root's to read. The gateway there is a
small program of its own, run as ``nobody``, that starts one run with the CLI backend as
``serve`` does; the runner looks for the token in every environment it can read.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from accounts_support import needs_root
from cli_run_support import own_request

from bridge.runner.cli import CliRunner

BOUND_S = 20


FDS_RUNNER = r"""
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


async def test_a_run_holds_only_stdin_stdout_and_stderr(tmp_path: Path) -> None:
    script = tmp_path / "runner.py"
    script.write_text(FDS_RUNNER)
    runner = CliRunner([sys.executable, str(script)], kill_grace_s=0.5)
    request = own_request(tmp_path, "fds", timeout_s=10)
    # what a gateway holds open while it starts runs: its database, its listening socket
    db = sqlite3.connect(str(tmp_path / "bridge.db"))
    db.execute("create table t (x)")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
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


NOBODY = 65534


REPO = Path(__file__).resolve().parents[3]


TOKEN = "1234567:review4-bot-token-in-the-gateway-environment"


ENVIRON_RUNNER = r"""
import json, os, sys
sys.stdin.readline()
found = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open("/proc/%s/environ" % pid, "rb") as fh:
                if sys.argv[1].encode() in fh.read():
                    found.append(int(pid))
        except OSError:
            pass
print(json.dumps({"ok": True, "answer": json.dumps(found)}), flush=True)
"""


GATEWAY = r"""
import asyncio, json, os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from bridge.runner.base import RunRequest
from bridge.runner.cli import CliRunner
from provisioning.homes import Homes
from provisioning.layout import init_root
from provisioning.sandbox import run_identity

async def main() -> None:
    work = Path(sys.argv[1])
    info = init_root(work / "root")
    home = Homes(info, isolated=False).ensure("web:environ-probe")
    runner = CliRunner([sys.argv[3], sys.argv[4], sys.argv[5]], kill_grace_s=1)
    request = RunRequest(
        home=home,
        identity=run_identity(home, surface="web"),
        conversation="web:environ-probe#1",
        prompt="hi",
        agent="default",
        approval_policy="low-risk",
        timeout_s=20,
    )
    handle = await asyncio.wait_for(runner.start(request), 30)
    async for _ in handle.events():
        pass
    result = await asyncio.wait_for(handle.wait(), 30)
    await asyncio.wait_for(handle.settled(), 30)
    await runner.close()
    print("RESULT", json.dumps({"ok": result.ok, "answer": result.answer, "error": result.error}))
    print("GATEWAY", os.getpid())

asyncio.run(main())
"""


@pytest.fixture
def nobody_dir(tmp_path: Path) -> Path:
    for parent in [tmp_path, *tmp_path.parents]:
        if parent in (Path("/tmp"), Path("/")):
            break
        os.chmod(parent, 0o755)
    work = tmp_path / "nobody"
    work.mkdir()
    os.chown(work, NOBODY, NOBODY)
    return work


def _as_nobody(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    prefix = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", "--"]
    return subprocess.run(
        [*prefix, *argv], capture_output=True, text=True, timeout=90, cwd=cwd, env=env
    )


@needs_root
def test_a_run_of_the_gateways_own_account_cannot_read_the_gateways_environment(
    nobody_dir: Path,
) -> None:
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    probe = _as_nobody([sys.executable, "-c", "import aiohttp, pydantic"], nobody_dir, env)
    if probe.returncode != 0:
        pytest.skip(f"the test interpreter is not usable by nobody: {probe.stderr[-200:]}")
    python = next(
        (p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None
    )
    if python is None:
        pytest.skip("no system python3 for the runner")
    script = nobody_dir / "runner.py"
    script.write_text(ENVIRON_RUNNER)
    os.chmod(script, 0o755)
    proc = _as_nobody(
        [sys.executable, "-c", GATEWAY, str(nobody_dir), str(REPO), python, str(script), TOKEN],
        nobody_dir,
        {**env, "JAZZ_BRIDGE_TELEGRAM__TOKEN": TOKEN},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    result = json.loads(next(line[7:] for line in lines if line.startswith("RESULT ")))
    gateway = int(next(line[8:] for line in lines if line.startswith("GATEWAY ")))
    assert result["ok"], result
    found = json.loads(result["answer"])
    assert found == [], (
        f"the run read the bot token in the environment of {found} (gateway {gateway})"
    )
