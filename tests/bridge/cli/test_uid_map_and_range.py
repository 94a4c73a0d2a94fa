"""The uid map and the uid range as an operator meets them through the CLI.

* The map is a file operators are told to edit by hand ("resolve it by hand ... or edit the
  map"); an entry whose ``gid`` is not a number must not turn ``repair`` (and ``serve``,
  whose start-up runs the same repair) into a Python traceback.
* When the uid range is used up the error must name a setting that exists.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from accounts_support import OperatorGroup, needs_root
from gateway_harness import run_cli

REPO = Path(__file__).resolve().parents[3]


def _cli(
    root: Path, group: OperatorGroup, lo: int, hi: int, *args: str
) -> subprocess.CompletedProcess[str]:
    """The CLI as root on ``root`` (isolated), its accounts from uids ``lo``..``hi``."""
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONPATH": str(REPO),
        "JAZZ_BRIDGE_ROOT": str(root),
        "JAZZ_BRIDGE_OPERATOR_GROUP": group.name,
        "JAZZ_BRIDGE_ACCOUNTS__UID_MIN": str(lo),
        "JAZZ_BRIDGE_ACCOUNTS__UID_MAX": str(hi),
        "JAZZ_BRIDGE_LOG__FORMAT": "text",
    }
    return run_cli(env, *args, cwd=root.parent, inherit=False)


@needs_root
def test_a_hand_edited_gid_in_the_map_is_no_traceback(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    lo, hi = uid_range
    made = _cli(shared_root, operator_group, lo, hi, "homes", "ensure", "web:edited")
    assert made.returncode == 0, made.stderr
    map_path = shared_root / "state" / "accounts.json"
    doc = json.loads(map_path.read_text())
    for entry in doc["accounts"].values():
        entry["gid"] = "7x"  # a typo while editing the map by hand
    map_path.write_text(json.dumps(doc))

    done = _cli(shared_root, operator_group, lo, hi, "repair")
    assert "Traceback" not in done.stderr, done.stderr[-1500:]
    if done.returncode != 0:  # refusing is fine, if it says which file is wrong
        assert "accounts.json" in done.stderr.strip().splitlines()[-1], done.stderr


@needs_root
def test_an_exhausted_uid_range_names_a_real_setting(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    lo = uid_range[0]
    first = _cli(shared_root, operator_group, lo, lo, "homes", "ensure", "web:first")
    assert first.returncode == 0, first.stderr
    second = _cli(shared_root, operator_group, lo, lo, "homes", "ensure", "web:second")
    assert second.returncode == 2
    line = second.stderr.strip().splitlines()[-1]
    assert "uid" in line, line
    # the settings are accounts.uid_min / accounts.uid_max; there is no accounts.uid_range
    assert "accounts.uid_max" in line or "JAZZ_BRIDGE_ACCOUNTS__UID_MAX" in line, line
