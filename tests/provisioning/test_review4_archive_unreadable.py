"""Archiving a home holding a file or directory the gateway cannot read.

Without root (the single-account gateway, or ``isolation = "off"`` run by a plain user), a
conversation's agent may ``chmod 000`` one of its own files: the gateway's account, the
file's owner, then cannot open it. The archiving skipped it ("not a file, directory or
link") and deleted the home: the file was gone for good, in no tarball. Now the home is
left as it is and the error names the file; an unreadable directory is named by its path in
the home, not as a bare ``Permission denied: 'd'``.

As root the archiving reads everything, so the gateway's view is made here by running it
in a child without ``CAP_DAC_OVERRIDE``/``CAP_DAC_READ_SEARCH`` (a plain owner's rights).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from provisioning import naming
from provisioning.archive import tarball_path
from provisioning.layout import init_root

REPO = Path(__file__).resolve().parents[2]
NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]

ARCHIVE = """
import sys
from pathlib import Path
from provisioning.archive import archive_home
from provisioning.layout import init_root
try:
    archive_home(init_root(Path(sys.argv[1])), sys.argv[2])
except Exception as exc:
    print(f"{type(exc).__name__}: {exc}")
    sys.exit(3)
"""


def _archive_as_owner(root: Path, name: str) -> subprocess.CompletedProcess[str]:
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv to drop root's read-everything capabilities")
        prefix = NO_DAC
    return subprocess.run(
        [*prefix, sys.executable, "-c", ARCHIVE, str(root), name],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )


def test_an_unreadable_file_keeps_its_home(tmp_path: Path) -> None:
    info = init_root(tmp_path / "r")
    name = naming.home_name("web:chmod000")
    home = info.layout.home(name)
    (home / "workspace").mkdir(parents=True)
    home.chmod(0o700)
    secret = home / "workspace" / "key.txt"
    secret.write_text("the only copy")
    secret.chmod(0)
    (home / "notes.md").write_text("kept too")

    done = _archive_as_owner(info.layout.root, name)

    assert secret.exists(), "the unreadable file was deleted with its home"
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert f"{name}/workspace/key.txt" in done.stdout
    assert not tarball_path(info.layout, name).exists()
    assert [e for e in os.listdir(info.layout.archive) if e.endswith(".tmp")] == []
    assert (home / "notes.md").read_text() == "kept too"


@pytest.mark.parametrize("mode", [0o000, 0o400])  # not openable; listable, not searchable
def test_an_unreadable_directory_is_named_by_its_path(tmp_path: Path, mode: int) -> None:
    info = init_root(tmp_path / "r")
    name = naming.home_name("web:chmod000dir")
    home = info.layout.home(name)
    locked = home / "workspace" / "d"
    locked.mkdir(parents=True)
    (locked / "f").write_text("inside")
    home.chmod(0o700)
    locked.chmod(mode)
    try:
        done = _archive_as_owner(info.layout.root, name)
    finally:
        locked.chmod(0o700)
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert f"{name}/workspace/d" in done.stdout, done.stdout
    assert "the home was not archived" in done.stdout
    assert (locked / "f").read_text() == "inside"
    assert not tarball_path(info.layout, name).exists()
