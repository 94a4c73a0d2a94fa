"""Review: a run's working directory entered through /proc/<gateway pid>/fd/N.

``RunIdentity.popen_kwargs`` now names the gateway's own descriptor by the gateway's pid
(``/proc/<os.getpid()>/fd/N``) instead of ``/proc/self/fd/N``. The child is a different
process, so the kernel checks whether it may look at the gateway's descriptors (a ptrace
"read" check: the gateway must be dumpable, or the child needs CAP_SYS_PTRACE, which the
systemd unit drops), and the pid is only right when /proc belongs to the gateway's pid
namespace. ``/proc/self/fd/N`` worked in both cases: the child still holds the (close-on-exec)
descriptor when it changes directory, before exec closes it.

Each case runs a small gateway in its own process and starts ``pwd -P`` the way
``bridge/runner/cli.py`` starts a run: ``open_workdir`` then ``popen_kwargs(workdir)``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from accounts_support import needs_root

NOBODY = 65534
REPO = Path(__file__).resolve().parents[2]

GATEWAY = r"""
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
        [*argv_prefix, sys.executable, "-c", GATEWAY, str(root), case, str(REPO)],
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


@pytest.fixture
def nobody_dir(tmp_path: Path) -> Path:
    for parent in [tmp_path, *tmp_path.parents]:
        if parent in (Path("/tmp"), Path("/")):
            break
        os.chmod(parent, 0o755)
    work = tmp_path / "nobody"
    work.mkdir()
    os.chown(work, NOBODY, NOBODY)
    probe = subprocess.run(
        [
            "setpriv",
            "--reuid",
            str(NOBODY),
            "--regid",
            str(NOBODY),
            "--clear-groups",
            "--",
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(REPO)!r}); import provisioning.sandbox",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=work,
    )
    if probe.returncode != 0:
        pytest.skip(f"the test interpreter is not usable by nobody: {probe.stderr[-200:]}")
    return work


@needs_root
def test_a_single_account_gateway_that_is_not_dumpable_still_starts_runs_in_the_workspace(
    nobody_dir: Path,
) -> None:
    """Single-account mode (the gateway is nobody, its runs are nobody): a gateway that is
    not dumpable. Its child (same uid, no CAP_SYS_PTRACE) may not follow the gateway's
    /proc/<pid>/fd/N, so every run fails to start ("Permission denied", reported by the
    runner as "check runner.command")."""
    as_nobody = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", "--"]
    got, want = _gateway(as_nobody, nobody_dir / "root", "not-dumpable", nobody_dir)
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
