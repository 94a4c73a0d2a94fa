"""Attachments saved into a home (``bridge/files.py``): the names people's files get, and
what a save cut short leaves.

A person's file lands in ``workspace/attachments/`` under a name the agent is told in the
prompt. That name must still say what the file is (its name and extension, in any script),
must never leave the attachments directory whatever the platform sent, must fit the file
system's 255-byte name limit and must never replace a file already there. A save cut short
(disk full, quota, kill -9) leaves nothing half-written under the person's file name, and
nothing for good under its hidden partial name.
"""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from accounts_support import OperatorGroup, needs_root

from bridge.files import ATTACHMENT_FILE_MODE, ATTACHMENTS_DIR, PARTIAL_PREFIX, save_attachment
from provisioning.accounts import AccountRegistry
from provisioning.homes import Home, Homes
from provisioning.layout import init_root
from provisioning.modes import PRIVATE_FILE_MODE

REPO = Path(__file__).resolve().parents[2]
NAME_MAX = 255


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Homes(init_root(tmp_path / "r"), isolated=False).ensure("web:names")


# -- the names -------------------------------------------------------------------------------


def saved_name(home: Home, name: str, message_id: int = 7) -> str:
    path = Path(save_attachment(home, message_id, name, b"data"))
    assert path.parent == home.path / "workspace" / "attachments"
    assert path.read_bytes() == b"data"
    return path.name


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        ("Отчёт.pdf", "7-Отчёт.pdf"),
        ("日本語.txt", "7-日本語.txt"),
        ("résumé.docx", "7-résumé.docx"),
        ("re\u0301sume\u0301.docx", "7-résumé.docx"),  # macOS sends decomposed (NFD) names
        ("\ufb01le.txt", "7-file.txt"),  # the "fi" ligature a PDF tool pasted
    ],
)
def test_a_non_ascii_name_keeps_its_name_and_extension(
    home: Home, sent: str, expected: str
) -> None:
    assert saved_name(home, sent) == expected


@pytest.mark.parametrize(
    "sent",
    ["x" * 300 + ".pdf", "я" * 300 + ".pdf", "漢" * 300 + ".pdf", "a." + "b" * 300 + ".pdf"],
)
def test_a_long_name_fits_the_file_system_and_keeps_its_extension(home: Home, sent: str) -> None:
    first = saved_name(home, sent, message_id=12345678901)
    again = saved_name(home, sent, message_id=12345678901)  # a second one: a longer prefix
    for name in (first, again):
        assert name.endswith(".pdf"), name
        assert len(os.fsencode(name)) <= NAME_MAX


@pytest.mark.parametrize(
    "sent",
    [
        "../../state/bridge.db",
        ".jazz/config.json",
        "..",
        ".",
        "",
        "...",
        "a\0b",
        "a/b/../c",
        "..\\..\\evil.exe",
        "-rf",
        "CON",
        "\u202eexe.pdf",  # right-to-left override: shows as "fdp.exe"
        "\u2025",  # "two dot leader", ".." under NFKC
        "\uff0e\uff0e\uff0fetc",  # fullwidth "../etc"
        "line\nbreak\n- /etc/shadow",  # a second "attached file" line in the prompt
        "\ud800.txt",
    ],
)
def test_a_hostile_name_stays_one_plain_file_in_the_attachments(home: Home, sent: str) -> None:
    name = saved_name(home, sent)
    assert name.startswith("7-") and len(name) > 2
    assert "/" not in name and "\n" not in name and "\0" not in name
    assert all(c.isprintable() and c != " " for c in name), repr(name)
    assert sorted(p.name for p in (home.path / "workspace").iterdir()) == ["attachments"]


def test_the_same_name_twice_overwrites_nothing(home: Home) -> None:
    attachments = home.path / "workspace" / "attachments"
    attachments.mkdir(parents=True, exist_ok=True)
    (attachments / "7-notes.txt").write_bytes(b"the agent's own")
    one = Path(save_attachment(home, 7, "notes.txt", b"one"))
    two = Path(save_attachment(home, 7, "notes.txt", b"two"))
    assert (attachments / "7-notes.txt").read_bytes() == b"the agent's own"
    assert (one.read_bytes(), two.read_bytes()) == (b"one", b"two")


# -- a save cut short ------------------------------------------------------------------------


def test_a_save_cut_short_leaves_no_partial_file(home: Home) -> None:
    """The disk fills (here: a file-size limit) half way through a person's file: a
    truncated file under the person's file name would pass for the complete one to the
    agent (or to the person's next message that refers to it)."""
    script = textwrap.dedent(
        f"""
        import resource, signal, sys
        from pathlib import Path
        from bridge.files import save_attachment
        from provisioning.homes import Homes
        from provisioning.layout import init_root

        home = Homes(init_root(Path({str(home.path.parents[1])!r})), isolated=False).ensure(
            "web:names"
        )
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            save_attachment(home, 8, "big.bin", b"x" * 100_000)
        except OSError as exc:
            print("refused:", exc)
            sys.exit(0)
        print("saved")
        sys.exit(1)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    left = sorted(p.name for p in (home.path / "workspace" / "attachments").iterdir())
    assert left == [], f"a truncated file was left looking complete: {left}"


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
    """A save killed mid-write (kill -9, power loss) leaves no ``.partial-`` file for good.

    An attachment is written under a hidden ``.partial-<message id>-<hex>`` name and linked to
    its real name once complete; a gateway killed in between left that partial in the
    conversation's ``workspace/attachments/`` forever (its space, and a half file the agent
    sees). The next save removes it, and nothing else: a link or directory named like a
    partial is neither followed nor removed, and the person's new file still lands."""
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
