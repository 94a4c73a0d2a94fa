"""The run's home: history files and artifacts, written with Jazz's modes, atomically.

Why it exists: the gateway reads and repairs what a runner leaves in a home, and relies on
Jazz's rules (files 0600 and directories 0700, group read kept in a setgid directory; a
file replaced whole, never half written). A home the run's account cannot write must be
named, with the account, before the turn asks anyone anything, and a corrupt history is
moved aside rather than ending the conversation.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import time
from typing import Any

from .contract import BadInput, HomeError
from .output import Output


def safe_name(key: str) -> str:
    """A file name for a conversation key: a readable prefix plus a sha256 prefix."""
    prefix = re.sub(r"[^a-z0-9._-]+", "-", key.lower()).strip("-.")[:40] or "conversation"
    return f"{prefix}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def modes_for(directory: str) -> tuple[int, int]:
    """Jazz's rule: files 0600, dirs 0700; in a setgid directory keep group read (0640/0750)."""
    try:
        setgid = bool(os.stat(directory).st_mode & stat.S_ISGID)
    except OSError:
        setgid = False
    return (0o640, 0o750) if setgid else (0o600, 0o700)


def ensure_dir(path: str) -> None:
    """``path`` and its missing parents, each made with the mode its parent calls for."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    if parent and parent != path:
        ensure_dir(parent)
    _, mode = modes_for(parent)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        return
    # the umask may have taken bits; a setgid parent's bit is inherited and kept
    os.chmod(path, mode | (os.stat(path).st_mode & stat.S_ISGID))


def fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def ensure_home(home: str) -> None:
    """The home exists (made with Jazz's modes) and this account can write into it.

    Checked before the turn, so nobody is asked to approve anything in a run that could
    never save its history; the error names the path and the account."""
    try:
        ensure_dir(home)
    except OSError as exc:
        raise HomeError(
            f"cannot create JAZZ_HOME {home}: {exc.strerror} (uid {os.getuid()}); "
            "make it, or its parent, writable by the run's account"
        ) from exc
    if not os.path.isdir(home):
        raise HomeError(f"JAZZ_HOME {home} is not a directory")
    if not os.access(home, os.W_OK | os.X_OK):
        raise HomeError(
            f"JAZZ_HOME {home} is not writable by uid {os.getuid()}; "
            "give the run's account write access to it"
        )


def atomic_write(path: str, data: bytes) -> None:
    """Write ``path`` whole, or raise HomeError naming it (the reason included)."""
    try:
        _atomic_write(path, data)
    except OSError as exc:
        raise HomeError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _atomic_write(path: str, data: bytes) -> None:
    """Write a temp file, fsync, rename into place, fsync the directory."""
    directory = os.path.dirname(path)
    ensure_dir(directory)
    file_mode, _ = modes_for(directory)
    tmp = os.path.join(
        directory, f".{os.path.basename(path)}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    )
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, file_mode)
    try:
        os.fchmod(fd, file_mode)  # whatever the umask took
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(directory)


def load_history(path: str, out: Output) -> list[dict[str, str]]:
    """The conversation's earlier turns; a corrupt file is moved aside (and said so)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise BadInput(f"cannot read the history {path}: {exc.strerror}") from exc
    try:
        loaded = json.loads(raw)
        if not valid_history(loaded):
            raise ValueError("not a list of {role, content}")
    except ValueError as exc:
        aside = f"{path}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}"
        os.replace(path, aside)
        out.stderr(f"reference runner: unreadable history {path} ({exc}) moved to {aside}")
        return []
    return list(loaded)


def valid_history(value: Any) -> bool:
    """A list of ``{"role": "user"|"assistant", "content": str}``."""
    return isinstance(value, list) and all(
        isinstance(h, dict)
        and h.get("role") in ("user", "assistant")
        and isinstance(h.get("content"), str)
        for h in value
    )
