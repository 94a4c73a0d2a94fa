"""An artifact whose name merely begins with two dots is inside the home.

The check for "outside the home" looked at whether the path relative to the home began
with "..": a file the agent named ``..notes.txt`` (or one in a directory ``..cache``) was
refused as 'outside the conversation's home' though it lies in it; a real ``..`` step out
is still refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.files import check_in_home, read_in_home
from provisioning.errors import UnsafePathError


def test_names_starting_with_two_dots_are_in_the_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "..cache").mkdir(parents=True)
    (home / "..notes.txt").write_bytes(b"notes")
    (home / "..cache" / "plot.png").write_bytes(b"png")
    (tmp_path / "outside.txt").write_bytes(b"secret")
    for path, data in (
        ("..notes.txt", b"notes"),
        (str(home / "..notes.txt"), b"notes"),
        ("..cache/plot.png", b"png"),
        ("./..cache/../..notes.txt", b"notes"),
    ):
        check_in_home(home, path)
        assert read_in_home(home, path) == data
    for outside in ("../outside.txt", str(tmp_path / "outside.txt"), "..", "../home/../x"):
        with pytest.raises(UnsafePathError):
            read_in_home(home, outside)
