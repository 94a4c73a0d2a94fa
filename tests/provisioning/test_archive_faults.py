"""Archiving when something goes wrong: a file or directory the gateway cannot read, a full
archive disk, an archiving cut off midway. The home is left whole, the error names the file,
and what a cut-off archiving left is removed by that home's next archiving or restore.

As root the archiving reads everything, so the gateway's view of an unreadable file is made
here by running it in a child without ``CAP_DAC_OVERRIDE``/``CAP_DAC_READ_SEARCH`` (a plain
owner's rights).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts_support import IS_ROOT
from home_support import REPO

from bridge.model import Inbound
from bridge.store import SqliteStore
from bridge.store.base import InboxState
from provisioning import naming
from provisioning.archive import archive_home, restore_home, tarball_path
from provisioning.layout import Layout, RootInfo, init_root

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
    """Without root (the single-account gateway, or ``isolation = "off"`` run by a plain
    user), a conversation's agent may ``chmod 000`` one of its own files: the gateway's
    account, the file's owner, then cannot open it. The archiving skipped it ("not a file,
    directory or link") and deleted the home: the file was gone for good, in no tarball.
    Now the home is left as it is and the error names the file."""
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
    """Named by its path in the home, not as a bare ``Permission denied: 'd'``."""
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


# -- a full archive disk ------------------------------------------------------------------

KEY = "web:fills-the-disk"
ARCHIVE_DISK = "256k"
BIG_FILE_BYTES = 2 * 1024 * 1024  # random: gzip cannot shrink it below the disk


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(REPO),
            "JAZZ_BRIDGE_ISOLATION": "off",
            "JAZZ_BRIDGE_ROOT": str(cwd / "root"),
            "JAZZ_BRIDGE_LOG__FORMAT": "text",
        },
    )


def answered_conversation(root: Path, key: str) -> None:
    """A conversation in the root's store whose one message was answered (idle)."""

    async def go() -> None:
        store = SqliteStore(root / "state" / "bridge.db")
        await store.open()
        try:
            message, _ = await store.accept(
                Inbound(platform="web", event_id="e1", thread_key=key, sender_id="u", text="x"),
                home=naming.home_name(key),
                is_command=False,
            )
            await store.complete_message(message.id, InboxState.DONE, [])
        finally:
            await store.close()

    asyncio.run(go())


@pytest.fixture
def small_archive_disk(tmp_path: Path) -> Iterator[Path]:
    if not IS_ROOT:
        pytest.skip("mounting a small file system needs root")
    archive = tmp_path / "root" / "archive"
    archive.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={ARCHIVE_DISK}", "tmpfs", str(archive)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield archive
    finally:
        subprocess.run(["umount", "-l", str(archive)], check=False, timeout=30)


def test_a_full_archive_disk_is_named(tmp_path: Path, small_archive_disk: Path) -> None:
    """``jazz-bridge homes archive KEY`` when the archive's disk is full: the operator saw
    ``jazz-bridge: error: [Errno 28] No space left on device`` and nothing else: not which
    disk (the archive's, the homes', the state's), not which file, not whether the home was
    still there. The line names the tarball it could not write and says the home is left
    as it is; the home is whole and no half tarball is left behind."""
    made = cli(tmp_path, "homes", "ensure", KEY)
    assert made.returncode == 0, made.stderr
    home = Path(made.stdout.strip())
    answered_conversation(tmp_path / "root", KEY)
    big = home / "workspace" / "big.bin"
    big.write_bytes(os.urandom(BIG_FILE_BYTES))

    done = cli(tmp_path, "homes", "archive", KEY)

    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    target = tarball_path(Layout(tmp_path / "root"), naming.home_name(KEY))
    assert "No space left on device" in line
    assert str(target) in line, line  # which file, so which disk
    assert "the home is left as it is" in line, line
    assert big.stat().st_size == BIG_FILE_BYTES
    assert os.listdir(small_archive_disk) == []  # no half tarball


# -- an archiving cut off ----------------------------------------------------------------


def test_an_archiving_cut_off_leaves_no_half_tarball_for_ever(tmp_path: Path) -> None:
    """A half-written tarball left in ``archive/`` by an archiving cut off (kill -9, power
    loss) is removed by the next archiving of that home, never by another's: before, it
    stayed for ever, as big as the home, in a directory operators rarely look at."""
    info = init_root(tmp_path / "r")
    name = naming.home_name("web:leftover")
    other = naming.home_name("web:other")
    for home in (name, other):
        info.layout.home(home).mkdir(mode=0o700)
        (info.layout.home(home) / "notes.txt").write_text("kept")
    archive_home(info, other)
    restore_home(info, other)  # archive/ exists now, as after any earlier archiving
    leftover = info.layout.archive / f".{name}.k3j9x0qa.tmp"  # what mkstemp names
    leftover.write_bytes(b"\x1f\x8b half a tarball")
    others = info.layout.archive / f".{name}-x.k3j9x0qa.tmp"  # a home named longer: not ours
    others.write_bytes(b"\x1f\x8b another home's")
    archive_home(info, name)
    left = sorted(os.listdir(info.layout.archive))
    assert left == sorted([others.name, tarball_path(info.layout, name).name]), left


# The packed home leaves ``chats/`` in one rename (to a hidden ``.archived-<home>.XXXXXXXX``)
# and is deleted there. An archiving cut off during that delete (Ctrl-C on ``homes archive``
# of a big home, kill -9, a restart) left the hidden copy, as big as the home, for ever:
# nothing ever looked for it. The tarball is whole by then, so the next restore or archiving
# of that home (under its lock) removes it; another home's leftovers are not touched.


def _leftover(info: RootInfo, name: str, suffix: str = "k3j9x0qa") -> Path:
    """A home renamed out of chats/ and partly deleted, as a cut-off archiving leaves it."""
    trash = info.layout.chats / f".archived-{name}.{suffix}"  # what mkdtemp names
    (trash / name / "workspace").mkdir(parents=True)
    (trash / name / "workspace" / "big.bin").write_bytes(b"\0" * 4096)
    return trash


def _home(info: RootInfo, key: str) -> str:
    name = naming.home_name(key)
    info.layout.home(name).mkdir(mode=0o700)
    (info.layout.home(name) / "notes.txt").write_text(key)
    return name


def test_the_next_restore_removes_the_half_deleted_copy(tmp_path: Path) -> None:
    info = init_root(tmp_path / "r")
    name = _home(info, "web:cut-off")
    archive_home(info, name)
    trash = _leftover(info, name)
    restore_home(info, name)
    assert (info.layout.home(name) / "notes.txt").read_text() == "web:cut-off"
    assert not trash.exists(), sorted(os.listdir(info.layout.chats))


def test_the_next_archiving_removes_it_and_spares_other_homes(tmp_path: Path) -> None:
    info = init_root(tmp_path / "r")
    name = _home(info, "web:cut")
    other = naming.home_name("web:cut-longer")  # its name starts with this one's
    trash = _leftover(info, name)
    others = _leftover(info, other)
    archive_home(info, name)
    assert not trash.exists()
    assert others.exists()  # another home's: left for its own archiving or restore
    assert sorted(os.listdir(info.layout.chats)) == [others.name]
