"""The systemd unit, sysusers.d and tmpfiles.d files: valid, and enough for the gateway.

``systemd-analyze verify`` and ``security --offline`` check the unit where systemd is
installed. Without PID 1 being systemd the unit cannot be started here, so its two
promises are checked the way the kernel enforces them: the real gateway (``repair``, then
``serve``) runs under ``setpriv`` with exactly the unit's capability bounding set and
``no_new_privs``, creates a conversation account, runs a turn as it and stops a run of
another uid. A control run without ``CAP_FSETID`` shows the set is not just "enough by
accident": without it every setgid bit is silently lost.
"""

from __future__ import annotations

import asyncio
import grp
import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bridge"))
from accounts_support import OperatorGroup, needs_root
from gateway_harness import Client, gateway_env, install_fake_runner, wait_until

from bridge.cli.served import SYSTEM_STATE_DIR

REPO = Path(__file__).resolve().parents[2]
SYSTEMD = REPO / "deploy" / "systemd"
UNIT = SYSTEMD / "jazz-bridge.service"
SYSUSERS = SYSTEMD / "sysusers.d" / "jazz-bridge.conf"
TMPFILES = SYSTEMD / "tmpfiles.d" / "jazz-bridge.conf"
INSTALLED = "/usr/local/bin/jazz-bridge"
CAP_NUMBERS = {
    "CAP_CHOWN": 0,
    "CAP_DAC_OVERRIDE": 1,
    "CAP_DAC_READ_SEARCH": 2,
    "CAP_FOWNER": 3,
    "CAP_FSETID": 4,
    "CAP_KILL": 5,
    "CAP_SETGID": 6,
    "CAP_SETUID": 7,
    "CAP_AUDIT_WRITE": 29,
}


def parse_unit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A unit file as sections of (key, value) in order (keys may repeat, unlike INI)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        assert current is not None, f"{path}: {line!r} outside a section"
        key, sep, value = line.partition("=")
        assert sep, f"{path}: not key=value: {line!r}"
        current.append((key.strip(), value.strip()))
    return sections


def values(section: list[tuple[str, str]], key: str) -> list[str]:
    return [v for k, v in section if k == key]


def one(section: list[tuple[str, str]], key: str) -> str:
    found = values(section, key)
    assert len(found) == 1, f"{key}: {found}"
    return found[0]


def unit_caps() -> list[str]:
    return one(parse_unit(UNIT)["Service"], "CapabilityBoundingSet").split()


def test_the_unit_repairs_then_serves_as_root_with_the_hardening_provisioning_allows() -> None:
    unit = parse_unit(UNIT)
    svc = unit["Service"]
    config = "--config /etc/jazz-bridge/jazz-bridge.toml"
    assert one(svc, "ExecStartPre") == f"{INSTALLED} repair {config}"
    assert one(svc, "ExecStart") == f"{INSTALLED} serve {config}"
    assert one(svc, "Restart") == "on-failure"
    assert not values(svc, "User") and not values(svc, "DynamicUser")  # root: makes accounts
    assert one(svc, "NoNewPrivileges") == "yes"
    assert one(svc, "ProtectSystem") == "strict"
    writable = one(svc, "ReadWritePaths").split()
    assert "/etc" in writable  # useradd creates lock, backup and temp files next to passwd
    assert one(svc, "PrivateTmp") == "yes" and one(svc, "ProtectHome") == "yes"
    assert set(one(svc, "RestrictAddressFamilies").split()) <= {
        "AF_UNIX",
        "AF_INET",
        "AF_INET6",
        "AF_NETLINK",
    }
    caps = unit_caps()
    assert {"CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_FOWNER", "CAP_KILL"} <= set(caps)
    assert set(caps) <= set(CAP_NUMBERS), "an unexpected capability: say why in the unit"
    assert not values(svc, "AmbientCapabilities") or one(svc, "AmbientCapabilities") == ""
    # settings that would break provisioning if someone "hardened" further
    assert values(svc, "RestrictSUIDSGID") in ([], ["no"])  # the root and homes are setgid
    # no conversation reads another's command line (the released CLI's message is on it)
    assert one(svc, "ProtectProc") == "invisible"
    # the gateway and its runs together are bounded (each run has rlimits of its own)
    assert int(one(svc, "TasksMax")) >= 4 * 512
    assert one(svc, "MemoryMax").endswith("%") and one(svc, "MemoryHigh").endswith("%")
    assert set(one(svc, "Delegate").split()) == {"memory", "pids"}  # a cgroup per run
    assert not values(svc, "PrivateUsers") and not values(svc, "MemoryDenyWriteExecute")
    assert one(unit["Install"], "WantedBy") == "multi-user.target"
    # where serve records the root it holds, writable under ProtectSystem=strict, so that
    # an operator's command from any directory finds that root
    assert Path("/var/lib") / one(svc, "StateDirectory") == SYSTEM_STATE_DIR

    # the unit, tmpfiles.d and the example config agree on where the root is
    root = tomllib.loads((REPO / "deploy" / "config.example.toml").read_text())["root"]
    assert root in writable
    tmpfiles = [ln.split() for ln in TMPFILES.read_text().splitlines() if ln[:1] == "d"]
    assert ["d", root, "2751", "root", "jazz-ops", "-"] in tmpfiles
    sysusers = [ln.split()[:2] for ln in SYSUSERS.read_text().splitlines() if ln[:1] in "gum"]
    assert ["g", "jazz-ops"] in sysusers


def _installed_copy(tmp_path: Path) -> Path:
    """The unit as installed, its ExecStart pointing at this checkout's jazz-bridge."""
    exe = shutil.which("jazz-bridge") or str(Path(sys.executable).parent / "jazz-bridge")
    assert os.access(exe, os.X_OK), "jazz-bridge is not installed in this environment"
    copy = tmp_path / "jazz-bridge.service"
    copy.write_text(UNIT.read_text().replace(INSTALLED, exe))
    return copy


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd is not installed")
def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    out = subprocess.run(
        ["systemd-analyze", "verify", str(_installed_copy(tmp_path))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # warnings (an unknown key, a bad value) are printed with exit status 0: none allowed
    assert out.returncode == 0 and out.stderr.strip() == "", out.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd is not installed")
def test_systemd_analyze_security_rates_the_unit_ok(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            "systemd-analyze",
            "security",
            "--offline=true",
            "--threshold=40",
            "--no-pager",
            str(_installed_copy(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # exposure 0 (safe) .. 10 (unsafe); the threshold is in tenths: at most 4.0 ("OK")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr


@needs_root
@pytest.mark.skipif(
    shutil.which("systemd-sysusers") is None or shutil.which("systemd-tmpfiles") is None,
    reason="systemd is not installed",
)
def test_sysusers_and_tmpfiles_make_the_group_account_and_root(tmp_path: Path) -> None:
    image = tmp_path / "image"  # an alternate root: the host's accounts are not touched
    (image / "etc").mkdir(parents=True)
    subprocess.run(["systemd-sysusers", f"--root={image}", str(SYSUSERS)], check=True)
    groups = {
        line.split(":")[0]: line.split(":")
        for line in (image / "etc" / "group").read_text().splitlines()
    }
    users = [line.split(":")[0] for line in (image / "etc" / "passwd").read_text().splitlines()]
    assert "jazz-ops" in groups and "jazz-bridge" in users
    assert "jazz-bridge" in groups["jazz-ops"][3].split(",")
    subprocess.run(["systemd-tmpfiles", f"--root={image}", "--create", str(TMPFILES)], check=True)
    st = (image / "srv" / "jazz-bridge").stat()
    assert stat.S_IMODE(st.st_mode) == 0o2751
    assert (st.st_uid, st.st_gid) == (0, int(groups["jazz-ops"][2]))


# -- the gateway under the unit's capabilities -------------------------------------------


def _setpriv(caps: list[str]) -> list[str]:
    keep = ",".join("+" + c.lower().removeprefix("cap_") for c in caps)
    return [
        "setpriv",
        "--no-new-privs",
        f"--bounding-set=-all,{keep}",
        "--inh-caps=-all",
        "--",
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as fh:
        return dict(line.rstrip("\n").split(":\t", 1) for line in fh if ":\t" in line)


def unit_env(
    root: Path,
    fake_dir: Path,
    uid_range: tuple[int, int],
    operator_group: OperatorGroup,
    port: int,
) -> dict[str, str]:
    """The gateway's environment as the unit gives it (isolation on, the operators' group),
    for ``python -m bridge.cli`` from this checkout."""
    env = gateway_env(
        root,
        fake_dir,
        uid_range,
        JAZZ_BRIDGE_OPERATOR_GROUP=operator_group.name,
        JAZZ_BRIDGE_SERVER__PORT=str(port),
        JAZZ_BRIDGE_ISOLATION="on",
    )
    env["PYTHONPATH"] = str(REPO)
    return env


@asynccontextmanager
async def served(cmd: list[str], env: dict[str, str], port: int) -> AsyncIterator[Client]:
    proc = await asyncio.create_subprocess_exec(
        *cmd, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    fake_dir = Path(json.loads(env["JAZZ_BRIDGE_RUNNER__EXTRA_ENV"])["FAKE_DIR"])
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:

            async def healthy() -> bool:
                if proc.returncode is not None:
                    raise AssertionError("jazz-bridge serve exited at start")
                try:
                    async with session.get(f"{base}/healthz") as resp:
                        return resp.status == 200
                except aiohttp.ClientError:
                    return False

            await wait_until(healthy, 60, "the gateway's /healthz")
            yield Client(base, session, fake_dir)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        assert proc.stderr is not None
        err = await asyncio.wait_for(proc.stderr.read(), 60)
        await asyncio.wait_for(proc.wait(), 60)
        if proc.returncode != 0 or os.environ.get("JB_SHOW_SERVE_LOG"):
            print(err.decode(errors="replace")[-4000:])


@needs_root
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="util-linux setpriv is missing")
async def test_the_gateway_provisions_runs_and_stops_runs_under_the_units_capabilities(
    shared_root: Path, fake_dir: Path, uid_range: tuple[int, int], operator_group: OperatorGroup
) -> None:
    caps = unit_caps()
    port = _free_port()
    env = unit_env(shared_root, fake_dir, uid_range, operator_group, port)
    cli = [sys.executable, "-m", "bridge.cli"]
    shared_root.mkdir()  # tmpfiles.d's line makes the (empty) root before the first start
    # ExecStartPre
    pre = subprocess.run(
        [*_setpriv(caps), *cli, "repair"], env=env, capture_output=True, text=True, timeout=120
    )
    assert pre.returncode == 0, pre.stderr
    # ExecStart
    async with served([*_setpriv(caps), *cli, "serve"], env, port) as client:
        await client.post("t1", "hello")
        answer = await client.wait_role("t1", "assistant")
        assert "fake answer to: hello" in answer[0]["text"]
        run = client.starts("web:t1")[0]
        accounts = json.loads((shared_root / "state" / "accounts.json").read_text())["accounts"]
        (home_name, entry), *_ = accounts.items()
        assert run["uid"] == entry["uid"] == pwd.getpwnam(entry["name"]).pw_uid != 0
        home = shared_root / "chats" / home_name
        for path, mode, owner in (
            (shared_root, 0o2751, 0),
            (shared_root / "chats", 0o2751, 0),
            (home, 0o2750, entry["uid"]),
        ):
            st = path.stat()
            assert stat.S_IMODE(st.st_mode) == mode, f"{path}: {oct(st.st_mode)}"
            assert (st.st_uid, st.st_gid) == (owner, operator_group.gid)

        # a run inherits no_new_privs, holds no capability, and can be killed (CAP_KILL)
        await client.post("t2", "hang")
        await wait_until(lambda: len(client.starts("web:t2")) == 1, what="the hanging run")
        pid = client.starts("web:t2")[0]["pid"]
        status = _status(pid)
        assert status["NoNewPrivs"].strip() == "1"
        assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0
        if os.readlink(f"/proc/{pid}/ns/user") == os.readlink("/proc/self/ns/user"):
            assert int(status["CapBnd"], 16) == sum(1 << CAP_NUMBERS[c] for c in caps)
        # else a run whose message is on argv, in a user namespace of its own account: its
        # bounding set there is the kernel's full one, for that namespace only; it holds
        # none of them (CapEff, CapPrm 0) and can gain none (NoNewPrivs, not uid 0 there)
        assert int(status["Uid"].split()[0]) != 0
        await client.post("t2", "/stop")
        await wait_until(lambda: not Path(f"/proc/{pid}").exists(), what="the run killed")
        await client.wait_role("t2", "error")


@needs_root
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="util-linux setpriv is missing")
def test_without_cap_fsetid_the_setgid_bits_are_silently_lost(
    shared_root: Path, uid_range: tuple[int, int], operator_group: OperatorGroup
) -> None:
    """The control: the unit's set is needed, not merely sufficient (and doctor catches it)."""
    caps = [c for c in unit_caps() if c != "CAP_FSETID"]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(REPO),
        "JAZZ_BRIDGE_ROOT": str(shared_root),
        "JAZZ_BRIDGE_OPERATOR_GROUP": operator_group.name,
        "JAZZ_BRIDGE_ACCOUNTS__UID_MIN": str(uid_range[0]),
        "JAZZ_BRIDGE_ACCOUNTS__UID_MAX": str(uid_range[1]),
    }
    out = subprocess.run(
        [*_setpriv(caps), sys.executable, "-m", "bridge.cli", "homes", "ensure", "web:x"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    chats = shared_root / "chats"
    (home,) = chats.iterdir()
    for path in (shared_root, chats, home):
        assert not path.stat().st_mode & stat.S_ISGID, path
        assert path.stat().st_gid == grp.getgrnam(operator_group.name).gr_gid


# the unit's /proc: a fresh one with hidepid=invisible (ProtectProc), its /proc/sys read-only
# over it (ProtectKernelTunables), which keeps any run from mounting a /proc of its own
UNIT_PROC = (
    "mount -t proc -o hidepid=invisible proc /proc && mount --bind /proc/sys /proc/sys && "
    'mount -o remount,bind,ro /proc/sys && exec "$@"'
)


@needs_root
async def test_under_the_units_proc_a_released_cli_run_takes_approvals_unseen_and_stops(
    shared_root: Path, fake_dir: Path, uid_range: tuple[int, int], operator_group: OperatorGroup
) -> None:
    """The released CLI's message is its argument: under the unit's /proc (ProtectProc,
    ProtectKernelTunables) and capabilities, another conversation cannot read it, the
    approval it asks for is answered, and a stop still ends a run the gateway cannot see."""
    caps = unit_caps()
    port = _free_port()
    env = unit_env(shared_root, fake_dir, uid_range, operator_group, port)
    env.update(install_fake_runner(fake_dir, released=True))
    unit_proc = ["unshare", "--mount", "--propagation", "private", "--"]
    unit_proc += ["sh", "-c", UNIT_PROC, "unit-proc"]
    cli = [*unit_proc, *_setpriv(caps), sys.executable, "-m", "bridge.cli"]
    async with served([*cli, "serve"], env, port) as client:
        await client.post("a", "approve the-secret-of-a")
        prompt = (await client.wait_role("a", "prompt"))[0]
        tokens = {c["label"]: c["token"] for c in prompt["choices"]}
        await client.post("b", "readprocs")
        await client.wait_role("b", "assistant")
        (procs,) = [e for e in client.runs() if e["event"] == "procs"]
        assert any("readprocs" in line for line in procs["cmdlines"]), procs
        assert not any("the-secret-of-a" in line for line in procs["cmdlines"]), procs
        status, body = await client.press("a", tokens["Approve"], "ada")
        assert status == 200, body
        answer = await client.wait_role("a", "assistant")
        assert "the tool was approved" in answer[0]["text"]

        await client.post("c", "hang")
        await wait_until(lambda: len(client.starts("web:c")) == 1, what="the hanging run")
        pid = client.starts("web:c")[0]["pid"]
        assert Path(f"/proc/{pid}").exists()  # the test sees the host's /proc
        await client.post("c", "/stop")
        await wait_until(lambda: not Path(f"/proc/{pid}").exists(), what="the run killed")
        errors = await client.wait_role("c", "error")
        assert "Stopped by ada" in errors[0]["text"]
