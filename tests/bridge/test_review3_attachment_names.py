"""Attachments saved into a home: the names people's files get.

A person's file lands in ``workspace/attachments/`` under a name the agent is told in the
prompt. That name must still say what the file is (its name and extension, in any script),
must never leave the attachments directory whatever the platform sent, must fit the file
system's 255-byte name limit and must never replace a file already there.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bridge.files import save_attachment
from provisioning.homes import Home, Homes
from provisioning.layout import init_root

NAME_MAX = 255


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Homes(init_root(tmp_path / "r"), isolated=False).ensure("web:names")


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
