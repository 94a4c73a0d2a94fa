"""Whole-file state: written atomically, read defensively.

A state file (the uid map, the adapters' small caches) is replaced as a whole: written to a
temp file beside it, flushed, renamed into place and the directory flushed, so a crash
leaves the old or the new file, never half of one. A file that cannot be parsed is moved
aside to ``<name>.corrupt-<UTC timestamp>`` with a warning naming both paths, and the caller
rebuilds; a file with a newer ``schemaVersion`` than this code knows is refused and left
untouched, so an older gateway never destroys a newer one's data.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .errors import NewerSchemaError, StateFileError
from .modes import STATE_FILE_MODE

log = logging.getLogger(__name__)

SCHEMA_KEY = "schemaVersion"


def fsync_dir(path: Path) -> None:
    """Flush a directory so a rename inside it survives a power cut."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, mode: int = STATE_FILE_MODE) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync the directory."""
    directory = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(directory)


def atomic_write_json(path: Path, document: dict[str, Any], mode: int = STATE_FILE_MODE) -> None:
    """Write a JSON state document atomically (sorted keys, trailing newline)."""
    data = (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()
    atomic_write_bytes(path, data, mode)


def corrupt_name(path: Path, now: datetime | None = None) -> Path:
    """Where an unreadable ``path`` is moved: ``<name>.corrupt-<UTC timestamp>``."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S%fZ")
    return path.with_name(f"{path.name}.corrupt-{stamp}")


def move_aside(path: Path, reason: str) -> Path:
    """Move an unreadable state file out of the way, warning with both paths."""
    target = corrupt_name(path)
    os.replace(path, target)
    fsync_dir(path.parent)
    log.warning(
        "state file %s is unreadable (%s); moved it aside to %s and rebuilding",
        path,
        reason,
        target,
    )
    return target


def read_json_state(path: Path, known_schema: int) -> dict[str, Any] | None:
    """Read a JSON state file.

    Returns None when the file does not exist or was unreadable (then it has been moved
    aside). Raises NewerSchemaError, leaving the file untouched, when its schemaVersion is
    newer than ``known_schema``.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateFileError(f"cannot read state file {path}: {exc.strerror}") from exc
    try:
        document = json.loads(raw)
        if not isinstance(document, dict):
            raise ValueError("top level is not an object")
        version = document.get(SCHEMA_KEY)
        if not isinstance(version, int) or isinstance(version, bool):
            raise ValueError(f"{SCHEMA_KEY} missing or not an integer")
    except (ValueError, UnicodeDecodeError) as exc:
        move_aside(path, str(exc))
        return None
    if version > known_schema:
        raise NewerSchemaError(
            f"state file {path} has {SCHEMA_KEY} {version}, newer than {known_schema} which this "
            "jazz-bridge understands; it was left untouched: upgrade jazz-bridge or point it at "
            "another root"
        )
    return document
