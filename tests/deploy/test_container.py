"""The container: Dockerfile and compose.yaml parsed and checked; entrypoint and health check run.

No container engine runs here, so the Dockerfile is parsed (every instruction known, every
COPY source present in the repository and not excluded from the build context, exec-form
ENTRYPOINT/CMD, HEALTHCHECK, VOLUME, root) and compose.yaml is loaded as YAML and checked
against it and the systemd unit's capability set. The image's own entrypoint script and
HEALTHCHECK command then run for real against this checkout's ``jazz-bridge``: repair, then
serve, the health check passing, and failing once the gateway is gone.
"""

from __future__ import annotations

import fnmatch
import grp
import json
import os
import shlex
import signal
import socket
import stat
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_systemd import unit_caps

REPO = Path(__file__).resolve().parents[2]
CONTAINER = REPO / "deploy" / "container"
DOCKERFILE = CONTAINER / "Dockerfile"
COMPOSE = CONTAINER / "compose.yaml"
# what pip installs: the top-level packages pyproject.toml names
PACKAGES = tuple(
    name.rstrip("*")
    for name in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"
    ]["find"]["include"]
)
KNOWN = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
    "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL", "MAINTAINER",
}  # fmt: skip


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # comment lines inside a continued instruction are ignored
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return out


def _exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def _ignored(rel: str, patterns: list[str]) -> bool:
    parts = Path(rel).parts
    for pattern in patterns:
        bare = pattern.removeprefix("**/")
        if fnmatch.fnmatch(rel, pattern) or any(fnmatch.fnmatch(p, bare) for p in parts):
            return True
        if rel == pattern or rel.startswith(pattern.rstrip("/") + "/"):
            return True
    return False


def healthcheck_command() -> list[str]:
    (args,) = [a for i, a in instructions(DOCKERFILE) if i == "HEALTHCHECK"]
    _, _, command = args.partition("CMD ")
    return _exec_form(command)


def test_the_dockerfile_parses_and_builds_from_the_repositorys_own_files() -> None:
    steps = instructions(DOCKERFILE)
    unknown = [i for i, _ in steps if i not in KNOWN]
    assert not unknown, f"unknown instructions: {unknown}"
    assert steps[0] == ("FROM", "python:3.11-slim")
    ignore = [
        ln.strip()
        for ln in (CONTAINER / "Dockerfile.dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    copied = []
    for instruction, args in steps:
        if instruction not in ("COPY", "ADD"):
            continue
        assert instruction == "COPY", "ADD fetches URLs and unpacks archives: use COPY"
        words = [w for w in shlex.split(args) if not w.startswith("--")]
        assert not any(w.startswith("--from") for w in shlex.split(args))
        *sources, _dest = words
        for source in sources:
            assert (REPO / source).exists(), f"COPY source {source} is not in the repository"
            assert not _ignored(source, ignore), f"{source} is excluded from the build context"
            copied.append(source)
    # the package builds from what was copied: its packages and its build metadata
    assert {"bridge", "adapters", "provisioning", "reference_runner"} <= set(PACKAGES)
    for needed in ("pyproject.toml", "README.md", *PACKAGES):
        assert needed in copied
    for package in PACKAGES:
        assert not _ignored(f"{package}/__init__.py", ignore)
    assert _ignored("bridge/__pycache__/x.pyc", ignore) and _ignored(".venv/bin/python", ignore)

    by_name: dict[str, list[str]] = {}
    for instruction, args in steps:
        by_name.setdefault(instruction, []).append(args)
    entrypoint = _exec_form(by_name["ENTRYPOINT"][-1])
    assert entrypoint[-1] == "/usr/local/bin/jazz-bridge-entrypoint"
    assert _exec_form(by_name["CMD"][-1]) == ["serve"]
    assert "/srv/jazz-bridge" in _exec_form(by_name["VOLUME"][-1])
    assert "8787" in by_name["EXPOSE"][-1].split()
    assert "USER" not in by_name  # root: it creates the conversations' accounts
    assert any("/healthz" in part for part in healthcheck_command())
    assert any("JAZZ_BRIDGE_CONFIG=/etc/jazz-bridge/jazz-bridge.toml" in e for e in by_name["ENV"])
    assert os.access(CONTAINER / "entrypoint.sh", os.X_OK)


def test_compose_yaml_is_valid_and_matches_the_image_and_the_unit() -> None:
    data = yaml.safe_load(COMPOSE.read_text())
    service = data["services"]["jazz-bridge"]
    build = service["build"]
    context = (COMPOSE.parent / build["context"]).resolve()
    assert context == REPO
    assert (context / build["dockerfile"]).resolve() == DOCKERFILE
    targets = [v.split(":", 1)[1] for v in service["volumes"]]
    assert "/srv/jazz-bridge" in targets
    named = service["volumes"][targets.index("/srv/jazz-bridge")].split(":", 1)[0]
    assert named in data["volumes"]
    assert any(str(p).endswith(":8787") for p in service["ports"])
    env_files = service["env_file"]
    assert env_files and all(not Path(f).is_absolute() for f in env_files)
    assert (CONTAINER / "jazz-bridge.env.example").is_file()
    assert not service.get("environment"), "secrets go to the env file, not compose.yaml"
    test = service["healthcheck"]["test"]
    assert test[0] == "CMD" and any("/healthz" in part for part in test)
    # the image's own check, which follows JAZZ_BRIDGE_SERVER__PORT (a fixed 8787 did not)
    assert test[1:] == healthcheck_command()
    # the same capabilities as the systemd unit, nothing more
    assert service["cap_drop"] == ["ALL"]
    assert sorted("CAP_" + c for c in service["cap_add"]) == sorted(unit_caps())
    assert "no-new-privileges:true" in service["security_opt"]
    assert "user" not in service


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _health(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = healthcheck_command()
    assert command[0] == "python"
    return subprocess.run(
        [sys.executable, *command[1:]], env=env, capture_output=True, text=True, timeout=30
    )


def test_the_entrypoint_repairs_then_serves_and_the_health_check_follows_it(
    shared_root: Path, uid_range: tuple[int, int]
) -> None:
    group = grp.getgrgid(os.getgid()).gr_name
    port = _free_port()
    bindir = str(Path(sys.executable).parent)
    env = {
        "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "PYTHONPATH": str(REPO),
        # the image's own config, with the host-specific parts overridden as an env file would
        "JAZZ_BRIDGE_CONFIG": str(CONTAINER / "jazz-bridge.toml"),
        "JAZZ_BRIDGE_ROOT": str(shared_root),
        "JAZZ_BRIDGE_OPERATOR_GROUP": group,
        "JAZZ_BRIDGE_SERVER__HOST": "127.0.0.1",
        "JAZZ_BRIDGE_SERVER__PORT": str(port),
        "JAZZ_BRIDGE_WEB__ENABLED": "true",  # some adapter must be on (loopback: no token)
        "JAZZ_BRIDGE_ACCOUNTS__UID_MIN": str(uid_range[0]),
        "JAZZ_BRIDGE_ACCOUNTS__UID_MAX": str(uid_range[1]),
    }
    assert _health(env).returncode != 0  # nothing listens yet: the check fails
    shared_root.mkdir()  # the image's WORKDIR (the volume's mount point): empty at first
    proc = subprocess.Popen(
        [str(CONTAINER / "entrypoint.sh")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while _health(env).returncode != 0:  # each attempt is one bounded HTTP request
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the health check never passed"
        # the repair ran before serve: the root exists with its modes and the operator group
        st = shared_root.stat()
        assert st.st_gid == grp.getgrnam(group).gr_gid
        if os.geteuid() == 0:
            assert stat.S_IMODE(st.st_mode) == 0o2751
        assert (shared_root / "chats").is_dir() and (shared_root / "state").is_dir()
        # the entrypoint exec'd the gateway: the pid serving is the entrypoint's own
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert b"serve" in cmdline and not any(c.endswith(b"entrypoint.sh") for c in cmdline)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    assert _health(env).returncode != 0  # and fails again once it is gone
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any("listening" in line["msg"] for line in lines)  # JSON logs off a terminal


@pytest.mark.parametrize("command", [["doctor", "--json"]])
def test_other_commands_run_without_the_repair(tmp_path: Path, command: list[str]) -> None:
    bindir = str(Path(sys.executable).parent)
    env = {
        "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "PYTHONPATH": str(REPO),
        "JAZZ_BRIDGE_CONFIG": str(CONTAINER / "jazz-bridge.toml"),
        "JAZZ_BRIDGE_ROOT": str(tmp_path / "never-created"),
        "JAZZ_BRIDGE_OPERATOR_GROUP": grp.getgrgid(os.getgid()).gr_name,
    }
    subprocess.run(
        [str(CONTAINER / "entrypoint.sh"), *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert not (tmp_path / "never-created").exists()  # no repair created the root
