"""Safe, deterministic names from thread keys.

Platform ids never go into a path or an account name as they are: a thread key becomes a
readable prefix (lower-case, only ``[a-z0-9._-]``) plus a hash of the whole key, so a
hostile key (``..``, ``/``, NUL, kilobytes of unicode) yields a bounded, safe directory
name and never a path outside ``chats/``.
"""

from __future__ import annotations

import functools
import hashlib
import re

from .errors import ThreadKeyError

MAX_THREAD_KEY_BYTES = 16 * 1024
PREFIX_MAX = 48
HASH_HEX = 16  # 64 bits: collisions between real thread keys are not a practical concern
ACCOUNT_PREFIX = "jb-"
ACCOUNT_HASH_HEX = 16
ACCOUNT_NAME_MAX = 31  # Debian's useradd limit
HOME_NAMES_CACHED = 4096  # home_name runs for every message: the busiest keys' names kept
ACCOUNT_NAME_RE = re.compile(r"^[a-z_][a-z0-9_-]*$")
HOME_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*-[0-9a-f]{16}$")

_UNSAFE = re.compile(r"[^a-z0-9._-]+")
_DASHES = re.compile(r"-{2,}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # C0 controls and DEL


def validate_thread_key(key: str) -> str:
    """Return ``key`` if it can name a conversation, else raise ThreadKeyError saying why."""
    if not isinstance(key, str):
        raise ThreadKeyError(f"thread key must be a string, got {type(key).__name__}")
    if not key.strip():
        raise ThreadKeyError("thread key is empty")
    if _CONTROL.search(key):
        raise ThreadKeyError("thread key contains a control character (NUL, newline, ...)")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ThreadKeyError("thread key is not valid unicode (lone surrogate)") from exc
    if size > MAX_THREAD_KEY_BYTES:
        raise ThreadKeyError(
            f"thread key is {size} bytes; at most {MAX_THREAD_KEY_BYTES} bytes are accepted"
        )
    return key


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=HOME_NAMES_CACHED)
def home_name(key: str) -> str:
    """The directory name of a thread key's home under ``chats/``."""
    validate_thread_key(key)
    prefix = _UNSAFE.sub("-", key.lower()).strip("-._")
    prefix = _DASHES.sub("-", prefix)[:PREFIX_MAX].rstrip("-._") or "thread"
    return f"{prefix}-{key_hash(key)[:HASH_HEX]}"


def is_home_name(name: str) -> bool:
    """True when ``name`` is shaped like a name :func:`home_name` produces."""
    return len(name) <= PREFIX_MAX + 1 + HASH_HEX and bool(HOME_NAME_RE.match(name))


def account_name(seed: str, salt: int = 0) -> str:
    """A Debian-valid account name (``jb-`` + hash of ``seed``); ``salt`` picks another on a clash.

    The seed is the root and the home's name, so two gateways with different roots never
    derive the same name for their conversations.
    """
    digest = hashlib.sha256(f"{seed}\0{salt}".encode()).hexdigest()[:ACCOUNT_HASH_HEX]
    name = f"{ACCOUNT_PREFIX}{digest}"
    assert len(name) <= ACCOUNT_NAME_MAX and ACCOUNT_NAME_RE.match(name)
    return name
