"""The root a command acts on when it is given none: the last root ``serve`` served, found
from any directory, and every command saying which root it acts on and why.

From another directory than ``serve``'s, ``doctor`` used to judge ``./jazz-bridge-home``
(five FAILs telling the user to make a second, empty root). The real ``serve`` records its
root (under the test's ``XDG_STATE_HOME``), and the real CLI finds it; the environment
still beats the record, and a record that is a symbolic link is not believed.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from accounts_support import needs_root
from cli_support import AS_NOBODY, NOBODY, interpreter, reachable_by_others, run_as

Cli = Callable[..., subprocess.CompletedProcess[str]]
Serving = Callable[..., AbstractContextManager[subprocess.Popen[str]]]


def _served(tmp_path: Path, serving: Serving) -> tuple[Path, Path]:
    """A root served once from ``tmp_path/ops`` (then stopped), and the state home it was
    recorded under."""
    root = tmp_path / "srv" / "jb"
    state_home = tmp_path / "state-home"
    ops = tmp_path / "ops"
    ops.mkdir()
    with serving(ops, JAZZ_BRIDGE_ROOT=str(root), XDG_STATE_HOME=str(state_home)):
        pass
    return root, state_home


def test_doctor_and_homes_list_from_another_directory_act_on_the_last_root_served(
    tmp_path: Path, cli: Cli, serving: Serving
) -> None:
    root, state_home = _served(tmp_path, serving)
    record = state_home / "jazz-bridge" / "last-root.json"
    assert json.loads(record.read_text())["root"] == str(root)
    assert os.stat(record).st_mode & 0o777 == 0o644
    served = root / "state" / "served-settings.json"
    assert os.stat(served).st_mode & 0o777 == 0o640
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    said = f"root {root} (the last root served, recorded in {record})"

    doctor = cli(elsewhere, "doctor", JAZZ_BRIDGE_ROOT=None, XDG_STATE_HOME=str(state_home))

    assert doctor.stdout.splitlines()[0] == f"OK   acting on {said}", doctor.stdout
    assert "run jazz-bridge init" not in doctor.stdout, doctor.stdout
    as_json = cli(
        elsewhere, "doctor", "--json", JAZZ_BRIDGE_ROOT=None, XDG_STATE_HOME=str(state_home)
    )
    assert json.loads(as_json.stdout)[0]["check"] == f"acting on {said}"
    listing = cli(elsewhere, "homes", "list", JAZZ_BRIDGE_ROOT=None, XDG_STATE_HOME=str(state_home))
    assert listing.returncode == 0, listing.stderr
    assert f"acted on {said}" in listing.stderr
    assert not (elsewhere / "jazz-bridge-home").exists()  # no second root made
    unknown = cli(
        elsewhere,
        "homes",
        "show",
        "web:nobody",
        JAZZ_BRIDGE_ROOT=None,
        XDG_STATE_HOME=str(state_home),
    )
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("jazz-bridge: error: no conversation matches")
    assert unknown.stderr.rstrip().endswith(f"(acting on {said})"), unknown.stderr


def test_the_environment_beats_the_record_and_says_so(
    tmp_path: Path, cli: Cli, serving: Serving
) -> None:
    root, state_home = _served(tmp_path, serving)
    record = state_home / "jazz-bridge" / "last-root.json"
    other = tmp_path / "other"

    done = cli(tmp_path, "doctor", JAZZ_BRIDGE_ROOT=str(other), XDG_STATE_HOME=str(state_home))

    assert done.stdout.splitlines()[0] == (
        f"OK   acting on root {other} (from JAZZ_BRIDGE_ROOT; the last root served is {root}, "
        f"recorded in {record})"
    ), done.stdout
    listing = cli(
        tmp_path, "homes", "list", JAZZ_BRIDGE_ROOT=str(other), XDG_STATE_HOME=str(state_home)
    )
    assert f"no gateway state at {other / 'state'}" in listing.stderr  # not the served root's
    # and the --root option beats both
    opt = tmp_path / "opt"
    by_option = cli(tmp_path, "doctor", "--root", str(opt), XDG_STATE_HOME=str(state_home))
    assert by_option.stdout.startswith(f"OK   acting on root {opt} (given by --root;")


def test_a_record_that_is_a_symbolic_link_is_ignored_with_a_warning(
    tmp_path: Path, cli: Cli, serving: Serving
) -> None:
    root, state_home = _served(tmp_path, serving)
    record = state_home / "jazz-bridge" / "last-root.json"
    planted = tmp_path / "planted.json"
    record.rename(planted)  # a whole, valid record, reached through a link
    record.symlink_to(planted)
    here = tmp_path / "here"
    here.mkdir()

    done = cli(here, "doctor", JAZZ_BRIDGE_ROOT=None, XDG_STATE_HOME=str(state_home))

    assert f"ignoring {record}: it is a symbolic link" in done.stderr, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"OK   acting on root {here / 'jazz-bridge-home'} (the default")
    assert str(root) not in done.stdout


@needs_root  # only root can give a file away
def test_a_record_of_another_user_is_ignored(tmp_path: Path, cli: Cli, serving: Serving) -> None:
    _root, state_home = _served(tmp_path, serving)
    record = state_home / "jazz-bridge" / "last-root.json"
    os.chown(record, 65534, 65534)

    done = cli(tmp_path, "doctor", JAZZ_BRIDGE_ROOT=None, XDG_STATE_HOME=str(state_home))

    assert f"ignoring {record}: owned by uid 65534" in done.stderr, done.stderr
    assert "(the default ./jazz-bridge-home" in done.stdout.splitlines()[0]


@needs_root  # to become another user
def test_a_user_other_than_root_finds_the_root_they_served_under_their_home(
    tmp_path: Path, serving: Serving
) -> None:
    reachable_by_others(tmp_path)
    python, extra = interpreter(AS_NOBODY, tmp_path, "nobody")
    home, root, elsewhere = tmp_path / "home", tmp_path / "theirs", tmp_path / "elsewhere"
    for path in (home, root, elsewhere):
        path.mkdir()
        os.chown(path, NOBODY, NOBODY)
    env = {"HOME": str(home), "XDG_STATE_HOME": None, **extra}
    command = [*AS_NOBODY, *python, "-m", "bridge.cli"]
    with serving(tmp_path, command=command, JAZZ_BRIDGE_ROOT=str(root), **env):
        pass
    record = home / ".local" / "state" / "jazz-bridge" / "last-root.json"

    done = run_as(
        AS_NOBODY,
        [*python, "-m", "bridge.cli", "doctor"],
        {"PATH": "/usr/bin:/bin", "HOME": str(home), "JAZZ_BRIDGE_LOG__FORMAT": "text", **extra},
        elsewhere,
    )

    assert done.stdout.splitlines()[0] == (
        f"OK   acting on root {root} (the last root served, recorded in {record})"
    ), done.stdout + done.stderr
    assert os.stat(record).st_uid == NOBODY
