"""Which program a run starts, and a Python every conversation's account can run it with.

The runner command is found once at start (configured, ``jazz`` on PATH, else the
stdlib-only reference runner copied where every account can read it); the interpreter
question comes up again wherever the gateway starts Python as another account (the
single-account subreaper, the reference runner), so both live here, apart from the CLI
backend that uses them.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from collections.abc import Sequence
from pathlib import Path

from reference_runner import bundle

TOOL_MODE = 0o0755  # rwxr-xr-x  shared runner tools, readable by every account


def reachable_by_others(path: str, *, need: int = stat.S_IXOTH) -> bool:
    """True when an account outside the owner's group can reach and use ``path``.

    A conversation account runs the runner: an interpreter under ``/root`` (pyenv) is not
    usable by it, whatever root can do.
    """
    real = os.path.realpath(path)
    try:
        if not os.stat(real).st_mode & need:
            return False
        parent = os.path.dirname(real)
        while True:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
            if parent == "/":
                return True
            parent = os.path.dirname(parent)
    except OSError:
        return False


def shared_interpreter() -> str:
    """A Python interpreter every account can run (ours if it is, else the system's)."""
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        if candidate and reachable_by_others(candidate):
            return candidate
    return sys.executable


def reference_copy(tools_dir: Path) -> Path:
    """Where :func:`default_command` puts the reference runner for every account to run."""
    return tools_dir / f"jazz-reference-runner{bundle.SUFFIX}"


def default_command(
    configured: Sequence[str] | None, tools_dir: Path | None = None
) -> tuple[list[str], bool]:
    """The runner command: configured, else ``jazz`` on PATH, else the reference runner.

    Returns ``(argv, is_reference)``. The reference runner (the stdlib-only package
    ``reference_runner``) is started as its directory; when ``tools_dir`` is given it is
    written there as one file (a zip application, readable by every account) and started
    with an interpreter every account can run, so isolated conversations can start it even
    when the gateway's own Python lives somewhere only root can reach.
    """
    if configured:
        return list(configured), False
    jazz = shutil.which("jazz")
    if jazz:
        return [jazz], False
    script = bundle.PACKAGE
    if tools_dir is not None:
        target = reference_copy(tools_dir)
        data = bundle.archive()
        if not target.exists() or target.read_bytes() != data:
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(data)
            os.chmod(tmp, TOOL_MODE)
            os.replace(tmp, target)
        script = target
    return [shared_interpreter(), str(script)], True
