"""Files crossing a home's boundary: attachments saved into it, artifacts read out of it.

Both go through pinned directory descriptors from the home down, with ``O_NOFOLLOW`` at
every step, so a conversation can't turn "save this download" or "upload this artifact"
into a write or read outside its own home by planting a link.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import re
import secrets
import stat
import unicodedata
from pathlib import Path

from provisioning import pinned
from provisioning.errors import UnsafePathError
from provisioning.homes import Home
from provisioning.modes import HOME_SUBDIR_MODE, PRIVATE_DIR_MODE, PRIVATE_FILE_MODE

log = logging.getLogger(__name__)

ATTACHMENT_FILE_MODE = 0o0640  # rw-r-----  conv:O, like the files Jazz writes in a setgid home
ATTACHMENTS_DIR = "attachments"
MAX_ARTIFACT_BYTES = 50 * 1024 * 1024

ATTACHMENT_NAME_BYTES = 180  # the cleaned name; with "<n>-<message id>-" well under NAME_MAX
EXTENSION_BYTES = 16  # a longer last part is no extension: truncating keeps it no more
NAME_TRIES = 100  # "<n>-<message id>-<name>" candidates before a save gives up
PARTIAL_PREFIX = ".partial-"  # a file being written; linked to its real name once complete
_PARTIAL_NAME = re.compile(re.escape(PARTIAL_PREFIX) + r"[0-9]+-[0-9a-f]{16}")  # exactly ours
_KEPT = frozenset("._-")
_RUNS = re.compile(r"_+")


def safe_filename(name: str, fallback: str = "file") -> str:
    """A platform's file name made one plain entry that still says what the file is.

    Compatibility forms are folded (NFKC: a decomposed "é", a "ﬁ" ligature, fullwidth
    letters), letters, digits and marks of every script are kept with ``.``, ``_`` and ``-``
    and anything else (slashes, controls, bidi overrides, spaces, lone surrogates) becomes
    ``_``; only the last path component counts and leading/trailing dots go, so no name
    can climb out or hide. Cut to ``ATTACHMENT_NAME_BYTES`` of UTF-8 keeping the extension.
    """
    text = unicodedata.normalize("NFKC", name).replace("\\", "/")
    base = text.rsplit("/", 1)[-1]
    cleaned = _RUNS.sub("_", "".join(c if _kept(c) else "_" for c in base))
    stem, dot, ext = cleaned.rpartition(".")
    stem = stem.strip("._")
    if not dot or not stem or not ext.strip("_") or len(ext.encode()) > EXTENSION_BYTES:
        return _cut(cleaned.strip("._"), ATTACHMENT_NAME_BYTES) or fallback
    stem = _cut(stem, ATTACHMENT_NAME_BYTES - len(ext.encode()) - 1).rstrip("._")
    return f"{stem or fallback}.{ext}"


def _kept(char: str) -> bool:
    return char in _KEPT or unicodedata.category(char)[0] in "LNM"


def _cut(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` of UTF-8, on a character boundary."""
    return text.encode()[:max_bytes].decode("utf-8", "ignore")


def save_attachment(home: Home, message_id: int, name: str, data: bytes) -> str:
    """Write an inbound file into ``workspace/attachments/``; returns its path. Blocking.

    The file is written under a hidden ``.partial-`` name and linked to its real name only
    once complete (a full disk or quota leaves no truncated file looking like the person's);
    an existing name, the person's earlier file or one the agent wrote, is never replaced.
    The partials an earlier save left when the gateway was killed mid-write go first.
    """
    uid = home.account.uid
    gid = home.operator_gid
    dir_mode = HOME_SUBDIR_MODE if home.isolated else PRIVATE_DIR_MODE
    file_mode = ATTACHMENT_FILE_MODE if home.isolated else PRIVATE_FILE_MODE
    filename = f"{message_id}-{safe_filename(name)}"
    with pinned.opened_dir(home.path) as home_fd:
        ws = pinned.ensure_dir(home_fd, "workspace", dir_mode, uid, gid)
        try:
            att = pinned.ensure_dir(ws, ATTACHMENTS_DIR, dir_mode, uid, gid)
        finally:
            os.close(ws)
        try:
            _remove_dead_partials(att)
            partial = f"{PARTIAL_PREFIX}{message_id}-{secrets.token_hex(8)}"
            try:
                _write_new(att, partial, data, uid, gid, file_mode)
                candidate = _link_unused(att, partial, filename)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(partial, dir_fd=att)
        finally:
            os.close(att)
    return str(home.path / "workspace" / ATTACHMENTS_DIR / candidate)


def _remove_dead_partials(dir_fd: int) -> None:
    """Unlink the partials a save killed mid-write (kill -9, power loss) left in ``dir_fd``.

    Every partial there is dead when a save begins: a root has one gateway (its instance
    lock), which saves a conversation's attachments at turn time, one file after another,
    in the conversation's one worker, before the run starts. Only regular files named
    exactly as a save names them go, unlinked by name in the pinned directory (an unlink
    follows no link); a link, directory or other name the agent made is left alone. Best
    effort: a partial that cannot go never keeps the person's file out.
    """
    try:
        names = os.listdir(dir_fd)
    except OSError as exc:
        log.warning("cannot list the attachments for leftover partial files: %s", exc)
        return
    for name in names:
        if not _PARTIAL_NAME.fullmatch(name):
            continue
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode):
                os.unlink(name, dir_fd=dir_fd)
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("cannot remove the leftover partial file %s: %s", name, exc)


def _write_new(dir_fd: int, name: str, data: bytes, uid: int, gid: int, mode: int) -> None:
    """Create ``name`` (never an existing entry, never through a link) holding ``data``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, mode, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb", closefd=False) as fh:
            fh.write(data)
        os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _link_unused(dir_fd: int, source: str, filename: str) -> str:
    """Give ``source`` the first free name of ``filename``, ``1-filename``, ...; that name."""
    for n in range(NAME_TRIES + 1):
        candidate = filename if n == 0 else f"{n}-{filename}"
        try:
            os.link(source, candidate, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(
        errno.EEXIST,
        f"{NAME_TRIES} files named like {filename} are already in the attachments; "
        "remove some of them from the conversation's workspace/attachments",
    )


def check_in_home(home_path: Path, path: str, max_bytes: int = MAX_ARTIFACT_BYTES) -> str:
    """Raise UnsafePathError unless ``path`` is a regular file inside the home; its path
    relative to the home (``workspace/plot.png``). Blocking."""
    read_in_home(home_path, path, max_bytes, read=False)
    return in_home(home_path, path)


def in_home(home_path: Path, path: str) -> str:
    """``path`` (absolute, through the home or its real location, or relative to the home)
    as a normalised path relative to the home; UnsafePathError when it is no path or
    climbs out. Only the text is looked at: nothing is opened."""
    try:  # a NUL or a lone surrogate (a runner's JSON allows both) names no file
        os.fsencode(path)
        if "\0" in path:
            raise ValueError("embedded null byte")
    except (ValueError, UnicodeError) as exc:
        raise UnsafePathError(
            f"artifact {shown_path(home_path, path)!r} is no path: {exc}"
        ) from None
    target = path if os.path.isabs(path) else os.path.join(home_path, path)
    rel = os.path.relpath(os.path.normpath(target), os.path.normpath(home_path))
    if _leaves(rel):
        # The runner may report a path through the home's real location.
        rel = os.path.relpath(os.path.normpath(target), os.path.realpath(home_path))
        if _leaves(rel):
            raise UnsafePathError(
                f"artifact {shown_path(home_path, path)} is outside the conversation's home"
            )
    return rel


def shown_path(home_path: Path, path: str) -> str:
    """``path`` as people may see it: relative to the home when it lies in it (lexically),
    else only its last part. The full path is for the operators' log, never the chat: it
    names the gateway's root and the home's directory."""
    for base in dict.fromkeys((os.path.normpath(home_path), os.path.realpath(home_path))):
        target = os.path.normpath(path if os.path.isabs(path) else os.path.join(base, path))
        rel = os.path.relpath(target, base)
        if not _leaves(rel):
            return rel
    return os.path.basename(os.path.normpath(path)) or path


def paths_for_people(text: str, home_path: Path | None, root: Path) -> str:
    """``text`` (a refusal or an error the gateway writes into a chat) with every path under
    the gateway's root named as people may see it: a file of the conversation's home
    relative to the home (``workspace/plot.png``), anything else under the root (another
    home, ``state/``) by its last part only. The log keeps the full text."""
    real_root = _real(str(root))
    bases: list[tuple[str, bool]] = []
    if home_path is not None:
        home = str(home_path)
        inside = os.path.relpath(home, root)
        # a home is <root>/chats/<name>, never a link: its real path is under the root's
        real_home = os.path.join(real_root, inside) if not _leaves(inside) else _real(home)
        bases += [(home, True), (real_home, True)]
    bases += [(str(root), False), (real_root, False)]
    kept = (b for b in bases if os.path.isabs(b[0]) and len(b[0].rstrip("/")) > 1)
    for base, is_home in dict.fromkeys(kept):
        base = base.rstrip("/")
        if base not in text:
            continue
        # the base, then its own path up to a space or a quote, or nothing more of a name
        pattern = re.compile(re.escape(base) + r"(?:/([^\s'\"`]*)|(?![\w.-]))")

        def shown(found: re.Match[str], is_home: bool = is_home) -> str:
            rest = found.group(1) or ""
            if not rest.strip("/"):
                return "the conversation's home" if is_home else "the gateway's root"
            return rest if is_home else os.path.basename(rest.rstrip("/"))

        text = pattern.sub(shown, text)
    return text


@functools.lru_cache(maxsize=16)
def _real(path: str) -> str:
    """A path's real location, looked up once: the root and its homes do not move while
    the gateway serves them."""
    return os.path.realpath(path)


def read_in_home(
    home_path: Path, path: str, max_bytes: int = MAX_ARTIFACT_BYTES, *, read: bool = True
) -> bytes:
    """Read a regular file that lies inside the home, following no link. Blocking.

    Raises UnsafePathError when the path leaves the home, crosses a link, is not a regular
    file, or belongs to another account than the home's: a hard link planted in the home
    (where the kernel lets anyone link a file they can name) would otherwise have the
    gateway read, as root, a file the conversation itself cannot (its tokens, /etc/shadow).
    Its message names the file relative to the home (it is shown in the chat).
    """
    shown = in_home(home_path, path)  # relative to the home, as the chat may see it
    parts = [p for p in shown.split(os.sep) if p not in ("", ".")]
    if not parts:
        raise UnsafePathError(f"artifact {shown} is not a file")
    # One directory held at a time (the home's owner read first): a path is the runner's
    # word, as deep as the agent made its tree, and one descriptor per level ran the whole
    # gateway out of descriptors for a path deeper than its limit.
    dir_fd = pinned.open_dir(home_path)
    try:
        owner = os.fstat(dir_fd).st_uid
        for part in parts[:-1]:
            try:
                child = pinned.open_dir(part, dir_fd)
            except UnsafePathError as exc:
                raise UnsafePathError(f"artifact {shown} cannot be opened safely: {exc}") from exc
            except OSError as exc:
                raise UnsafePathError(
                    f"artifact {shown} cannot be opened safely: {exc.strerror}"
                ) from exc
            os.close(dir_fd)
            dir_fd = child
        try:
            fd = os.open(
                parts[-1],
                os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                dir_fd=dir_fd,
            )
        except OSError as exc:
            raise UnsafePathError(
                f"artifact {shown} cannot be opened safely: {exc.strerror}"
            ) from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePathError(f"artifact {shown} is not a regular file")
            if st.st_uid != owner:
                raise UnsafePathError(
                    f"artifact {shown} belongs to uid {st.st_uid}, not to the conversation's "
                    f"account (uid {owner}); it is not sent"
                )
            if st.st_size > max_bytes:
                raise UnsafePathError(
                    f"artifact {shown} is {st.st_size} bytes, over the {max_bytes}-byte limit"
                )
            if not read:
                return b""
            with os.fdopen(fd, "rb", closefd=False) as fh:
                return fh.read(max_bytes + 1)[:max_bytes]
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


def _leaves(rel: str) -> bool:
    """Whether a normalised relative path climbs out (``..`` as a step, not ``..notes``)."""
    return os.path.isabs(rel) or rel == os.pardir or rel.startswith(os.pardir + os.sep)
