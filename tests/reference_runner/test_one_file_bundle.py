"""The one-file copy conversation accounts start: a zip application of the package.

(:mod:`reference_runner.bundle`, and :func:`bridge.runner.cli.default_command`, which writes
it under ``<root>/tools/``.)
"""

from __future__ import annotations

import ast
import io
import os
import stat
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from reference_support import prompt

from bridge.runner.command import TOOL_MODE, default_command, reference_copy, shared_interpreter
from reference_runner import bundle

PACKAGE = bundle.PACKAGE.name


def test_the_archive_holds_every_module_and_is_the_same_bytes_each_time() -> None:
    data = bundle.archive()
    assert data == bundle.archive()  # a gateway start rewrites the copy only on a change
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    modules = sorted(f"reference_runner/{p.name}" for p in bundle.PACKAGE.glob("*.py"))
    assert names == ["__main__.py", *modules]
    assert {"reference_runner/cli.py", "reference_runner/run.py"} <= set(names)


def test_the_archive_speaks_the_contract_with_no_site_packages(spawn: Any, tmp_path: Path) -> None:
    copy = tmp_path / "tools" / f"jazz-reference-runner{bundle.SUFFIX}"
    copy.parent.mkdir()
    copy.write_bytes(bundle.archive())
    home = tmp_path / "home"
    command = [sys.executable, "-S", str(copy)]
    res = spawn(prompt("hi !artifact plot.png"), home=home, command=command, cwd=tmp_path)
    result = res.finish()
    assert result.code == 0 and "not an AI" in result.answer
    assert result.envelope is not None and len(result.envelope["artifacts"]) == 1
    assert (home / "history").is_dir()


def test_serve_writes_the_copy_once_for_every_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-jazz-here"))
    tools = tmp_path / "tools"
    tools.mkdir()
    command, is_reference = default_command(None, tools)
    copy = reference_copy(tools)
    assert is_reference and command == [shared_interpreter(), str(copy)]
    assert copy.read_bytes() == bundle.archive()
    assert stat.S_IMODE(copy.stat().st_mode) == TOOL_MODE and TOOL_MODE & stat.S_IROTH
    written = copy.stat().st_mtime_ns
    os.utime(copy, ns=(written - 10**9, written - 10**9))
    assert default_command(None, tools) == (command, True)
    assert copy.stat().st_mtime_ns == written - 10**9  # the same bytes: not written again
    assert not [p for p in tools.iterdir() if p != copy]  # no temporary file left
    assert default_command(None) == ([shared_interpreter(), str(bundle.PACKAGE)], True)
    assert default_command(["/opt/jazz"], tools) == (["/opt/jazz"], False)


def test_the_package_imports_only_the_standard_library_and_itself() -> None:
    """What makes one file enough: nothing of the gateway, nothing third-party."""
    outside: list[str] = []
    for path in sorted(bundle.PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("__future__", PACKAGE):
                    outside.append(f"{path.name}: {name}")
    assert outside == []
