"""Doctor's check of the home template (``runner.home_template``) new homes are seeded from:
the released Jazz CLI fails every run in a home without its ``config.json`` and agent.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from .check import Check

TEMPLATE_UNSET = (
    "runner.home_template is not set: the released Jazz CLI fails every run in a new home "
    "with 'No agent found'"
)
MAX_NAMED_LINKS = 5


def home_template_checks(template: Path | None, agent: str, *, released_cli: bool) -> list[Check]:
    """The home template (``runner.home_template``) new homes are seeded from.

    OK when it has ``config.json`` and ``agents/<agent>.json``, both regular files (not
    links) this process can read, ``config.json`` valid JSON; a WARN naming what is missing
    otherwise, and one naming the links and special files in it (never copied). Unset, a
    WARN only when ``released_cli`` (the released CLI cannot run in a home without them).
    """
    if template is None:
        if not released_cli:
            return []
        fix = (
            f"set runner.home_template to a directory with config.json and agents/{agent}.json "
            "(see the README)"
        )
        return [Check(True, TEMPLATE_UNSET, fix, warn=True)]
    what = f"home template {template} has config.json and agents/{agent}.json"
    missing = [
        problem
        for rel, parse in (("config.json", True), (f"agents/{agent}.json", False))
        if (problem := _template_file_problem(template, rel, parse)) is not None
    ]
    checks = [
        Check(
            True,
            what,
            "missing: " + "; ".join(missing) + " (new homes are seeded from it)",
            warn=True,
        )
        if missing
        else Check(True, what)
    ]
    skipped = _template_links(template)
    if skipped:
        shown = ", ".join(skipped[:MAX_NAMED_LINKS]) + (
            f" and {len(skipped) - MAX_NAMED_LINKS} more" if len(skipped) > MAX_NAMED_LINKS else ""
        )
        checks.append(
            Check(
                True,
                f"home template {template} holds only files and directories",
                f"not copied into new homes (links are never followed): {shown}; put the "
                "files themselves there",
                warn=True,
            )
        )
    return checks


def _template_file_problem(template: Path, rel: str, parse: bool) -> str | None:
    """What is wrong with ``template/rel`` as a file a new home needs (None: nothing)."""
    path = template / rel
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return f"{rel} (no such file)"
    except OSError as exc:
        return f"{rel} ({exc.strerror or exc})"
    if stat.S_ISLNK(st.st_mode):
        return f"{rel} (a symbolic link, never copied: put the file itself there)"
    if not stat.S_ISREG(st.st_mode):
        return f"{rel} (not a regular file)"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return f"{rel} (not readable by uid {os.geteuid()}: {exc.strerror or exc})"
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(1024 * 1024 + 1)
    if parse:
        try:
            json.loads(data)
        except ValueError as exc:
            return f"{rel} (not valid JSON: {exc})"
    return None


def _template_links(template: Path) -> list[str]:
    """The links, FIFOs, sockets and devices in ``template`` (relative paths), not followed."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(template, followlinks=False):
        for name in [*dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                found.append(os.path.relpath(path, template))
        if len(found) > 100:
            break
    return sorted(found)
