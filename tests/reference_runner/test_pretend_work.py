"""Pretend agent work: artifacts, long answers, the environment.

(:mod:`reference_runner.pretend`.)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from reference_support import once


def test_artifacts_are_written_and_listed(spawn: Any, tmp_path: Path) -> None:
    res = once(spawn, "!artifact plot.png\n!artifact ../../notes.md")
    env = res.envelope
    assert env is not None
    png, notes = env["artifacts"]
    assert png == {
        "kind": "file",
        "path": str(tmp_path / "workspace" / "plot.png"),
        "mediaType": "image/png",
        "tool": "reference",
        "source": "rendered",
    }
    data = Path(png["path"]).read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and data.endswith(b"IEND\xaeB`\x82")
    assert notes["path"] == str(tmp_path / "workspace" / "notes.md")  # never outside
    assert notes["mediaType"] == "text/markdown" and Path(notes["path"]).is_file()


def test_long_answers_have_paragraphs_and_balanced_code_blocks(spawn: Any) -> None:
    answer = once(spawn, "!long 6000").answer
    assert 6000 <= len(answer) < 7000
    assert answer.count("```") >= 2 and answer.count("```") % 2 == 0
    assert answer.count("\n\n") >= 5


def test_env_lists_names_not_values_and_the_identity(spawn: Any) -> None:
    res = once(spawn, "!env", env={"SOME_SETTING": "value-not-shown"}, umask=0o027)
    assert "SOME_SETTING" in res.answer and "JAZZ_HOME" in res.answer
    assert "value-not-shown" not in res.answer
    assert f"uid={os.getuid()} gid={os.getgid()}" in res.answer
    assert "umask=0027" in res.answer
