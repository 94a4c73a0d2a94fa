"""``jazz-bridge doctor`` run by someone other than the gateway's account: it judges the
root by the root's own rules, and never passes what it could not look at.

* Run by a member of the operator group (not root) on the root a root gateway made, it
  must judge the homes by the root's rules (isolated: ``2750 conv:O``), not by whether *its
  own* process could switch users.
* ``chats/`` is ``2751``: only the gateway's account and the operator group may list it.
  Run by anyone else (an admin not yet in the group, a new login without ``newgrp``) on a
  single-account root, doctor could not see a single home, checked none, and printed every
  line OK with exit 0: a clean bill of health for homes it never looked at. It now fails a
  check saying the homes could not be read and how to become able to.

Real accounts (``nobody``, the operator group fixture's member), the real CLI in a
subprocess (``setpriv``).
"""

from __future__ import annotations

import os
from pathlib import Path

from accounts_support import OperatorGroup, needs_root
from cli_support import AS_NOBODY, REPO, interpreter, run_as
from gateway_harness import run_cli


def _as_member(group: OperatorGroup) -> list[str]:
    return [
        "setpriv",
        f"--reuid={group.member_uid}",
        f"--regid={group.gid}",
        f"--groups={group.gid}",
        "--",
    ]


def _root_env(root: Path, group: OperatorGroup, uid_range: tuple[int, int]) -> dict[str, str]:
    return {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "JAZZ_BRIDGE_ROOT": str(root),
        "JAZZ_BRIDGE_OPERATOR_GROUP": group.name,
        "JAZZ_BRIDGE_ACCOUNTS__UID_MIN": str(uid_range[0]),
        "JAZZ_BRIDGE_ACCOUNTS__UID_MAX": str(uid_range[1]),
        "JAZZ_BRIDGE_LOG__FORMAT": "text",
    }


@needs_root
def test_doctor_as_an_operator_judges_isolated_homes_by_the_roots_rules(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int], tmp_path: Path
) -> None:
    env = _root_env(shared_root, operator_group, uid_range)
    as_gateway = {**env, "PYTHONPATH": str(REPO)}
    made = run_cli(as_gateway, "homes", "ensure", "slack:T0:C0:1.1", cwd=tmp_path, inherit=False)
    assert made.returncode == 0, made.stderr
    home = Path(made.stdout.strip())
    assert oct(os.lstat(home).st_mode & 0o7777) == "0o2750"  # exactly as DESIGN says

    # as root, doctor is happy with that home
    as_root = run_cli(as_gateway, "doctor", cwd=tmp_path, inherit=False)
    assert f"OK   home {home.name} 2750" in as_root.stdout, as_root.stdout

    # an operator (member of the group, not root) asks the same doctor about the same root
    member = _as_member(operator_group)
    python, extra = interpreter(member, tmp_path, "a non-root operator account")
    done = run_as(member, [*python, "-m", "bridge.cli", "doctor"], {**env, **extra}, tmp_path)
    home_lines = [line for line in done.stdout.splitlines() if f"home {home.name}" in line]
    assert home_lines, done.stdout + done.stderr
    # the home is exactly right; the operator must not be told it is broken ("want 0700")
    assert not any(line.startswith("FAIL") for line in home_lines), home_lines


@needs_root
def test_doctor_that_cannot_list_the_homes_does_not_pass(tmp_path: Path) -> None:
    for parent in [tmp_path, *tmp_path.parents]:
        if parent in (Path("/tmp"), Path("/")):
            break
        os.chmod(parent, 0o755)  # nobody may reach the root, as an admin can
    env = {
        "PATH": "/usr/bin:/bin",
        "JAZZ_BRIDGE_ROOT": str(tmp_path / "root"),
        "JAZZ_BRIDGE_ISOLATION": "off",
        "JAZZ_BRIDGE_LOG__FORMAT": "text",
    }
    made = run_cli(
        {**env, "PYTHONPATH": str(REPO)},
        "homes",
        "ensure",
        "web:demo",
        cwd=tmp_path,
        inherit=False,
    )
    assert made.returncode == 0, made.stderr
    python, extra = interpreter(AS_NOBODY, tmp_path, "nobody")

    done = run_as(AS_NOBODY, [*python, "-m", "bridge.cli", "doctor"], {**env, **extra}, tmp_path)

    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stdout + done.stderr
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
    assert any(str(tmp_path / "root" / "chats") in line for line in failed), done.stdout
    assert any("operator group" in line for line in failed), failed
