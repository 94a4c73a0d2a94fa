"""A save killed mid-write (kill -9, power loss) leaves no ``.partial-`` file for good.

An attachment is written under a hidden ``.partial-<message id>-<hex>`` name and linked to
its real name once complete; a gateway killed in between left that partial in the
conversation's ``workspace/attachments/`` forever (its space, and a half file the agent
sees). The next save removes it, and nothing else: a link or directory named like a
partial is neither followed nor removed, and the person's new file still lands.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from accounts_support import OperatorGroup, needs_root

from bridge.files import ATTACHMENT_FILE_MODE, ATTACHMENTS_DIR, PARTIAL_PREFIX, save_attachment
from provisioning.accounts import AccountRegistry
from provisioning.homes import Home, Homes
from provisioning.layout import init_root
from provisioning.modes import PRIVATE_FILE_MODE

CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _partial_name(message_id: int) -> str:
    return f"{PARTIAL_PREFIX}{message_id}-{secrets.token_hex(8)}"


def _crashed_write(att: Path, message_id: int, mode: int, owner: tuple[int, int] | None) -> str:
    """A partial as a killed save leaves it: created like the save creates it, half written,
    handed to ``owner`` when the kill came after the chown (None: before it, still root's)."""
    name = _partial_name(message_id)
    fd = os.open(att / name, CREATE, mode)
    try:
        os.write(fd, b"half of a file" * 1000)
        if owner is not None:
            os.fchown(fd, *owner)
            os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return name


def _plant_traps(att: Path, outside: Path) -> dict[str, Path]:
    """Links and directories named like partials, a link pointing out of the home each."""
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("not the conversation's")
    linked = outside / "linked.txt"
    linked.write_text("hard-linked in")
    traps = {
        _partial_name(3): secret,  # symbolic link, a partial's exact name
        ".partial-y": outside,  # symbolic link to a directory
    }
    for name, target in traps.items():
        (att / name).symlink_to(target)
    for name in (_partial_name(4), ".partial-x"):
        (att / name).mkdir()
        (att / name / "kept.txt").write_text("inside a directory")
    hard = _partial_name(5)
    os.link(linked, att / hard)
    (att / ".partial-notes").write_text("the agent's own file")
    return {"hard": att / hard}


def _check_after(att: Path, outside: Path, leftovers: list[str]) -> Path:
    names = sorted(p.name for p in att.iterdir())
    for name in leftovers:
        assert name not in names, f"the killed save's {name} is still in the attachments"
    # nothing followed: what links pointed at is intact; links and directories are still there
    assert (outside / "secret.txt").read_text() == "not the conversation's"
    assert (outside / "linked.txt").read_text() == "hard-linked in"
    links = [n for n in names if (att / n).is_symlink()]
    dirs = [n for n in names if not (att / n).is_symlink() and (att / n).is_dir()]
    assert len(links) == 2 and ".partial-y" in links
    assert len(dirs) == 2 and ".partial-x" in dirs
    for d in dirs:
        assert (att / d / "kept.txt").read_text() == "inside a directory"
    assert (att / ".partial-notes").read_text() == "the agent's own file"
    saved = att / "9-report.pdf"
    assert saved.read_bytes() == b"%PDF the whole file"
    return saved


def _att(home: Home) -> Path:
    att = home.path / "workspace" / ATTACHMENTS_DIR
    att.mkdir(parents=True, exist_ok=True)  # a first save made it (with its owner and mode)
    return att


def test_a_killed_save_leaves_nothing_after_the_next_save_private_home(tmp_path: Path) -> None:
    home = Homes(init_root(tmp_path / "r"), isolated=False).ensure("web:partials")
    save_attachment(home, 1, "first.txt", b"first")
    att = _att(home)
    me = (os.geteuid(), os.getegid())
    leftovers = [
        _crashed_write(att, 7, PRIVATE_FILE_MODE, None),
        _crashed_write(att, 8, PRIVATE_FILE_MODE, me),
    ]
    traps = _plant_traps(att, tmp_path / "outside")
    path = save_attachment(home, 9, "report.pdf", b"%PDF the whole file")
    leftovers.append(traps["hard"].name)  # a regular file by a partial's name: only unlinked
    saved = _check_after(att, tmp_path / "outside", leftovers)
    assert path == str(saved)
    assert (att / "1-first.txt").read_bytes() == b"first"


@needs_root
def test_a_killed_save_leaves_nothing_after_the_next_save_isolated_home(
    shared_root: Path, operator_group: OperatorGroup, uid_range: tuple[int, int]
) -> None:
    info = init_root(shared_root, operator_group.name)
    registry = AccountRegistry(info.layout, info.operator_gid, uid_range)
    home = Homes(info, isolated=True, registry=registry).ensure("web:partials")
    save_attachment(home, 1, "first.txt", b"first")
    att = _att(home)
    conv = (home.account.uid, home.operator_gid)
    leftovers = [
        _crashed_write(att, 7, ATTACHMENT_FILE_MODE, None),  # killed mid-write: root's
        _crashed_write(att, 8, ATTACHMENT_FILE_MODE, conv),  # killed before the link
    ]
    assert os.stat(att / leftovers[0]).st_uid == 0
    outside = shared_root.parent / "outside"
    traps = _plant_traps(att, outside)
    path = save_attachment(home, 9, "report.pdf", b"%PDF the whole file")
    leftovers.append(traps["hard"].name)
    saved = _check_after(att, outside, leftovers)
    assert path == str(saved)
    st = os.stat(saved)
    assert (st.st_uid, st.st_gid) == conv
    assert stat.S_IMODE(st.st_mode) == ATTACHMENT_FILE_MODE
