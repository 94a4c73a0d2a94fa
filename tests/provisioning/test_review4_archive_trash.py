"""What an archiving cut off while it deleted the packed home leaves in ``chats/``.

The packed home leaves ``chats/`` in one rename (to a hidden ``.archived-<home>.XXXXXXXX``)
and is deleted there. An archiving cut off during that delete (Ctrl-C on ``homes archive``
of a big home, kill -9, a restart) left the hidden copy, as big as the home, for ever:
nothing ever looked for it. The tarball is whole by then, so the next restore or archiving
of that home (under its lock) removes it; another home's leftovers are not touched.
"""

from __future__ import annotations

import os
from pathlib import Path

from provisioning import naming
from provisioning.archive import archive_home, restore_home
from provisioning.layout import RootInfo, init_root


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
