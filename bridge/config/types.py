"""The value types settings share: a token, an http(s) address, and paths that mean what
they say.

The core's sections and every adapter's (``Token`` for the web chat, ``HttpUrl`` for a
platform's base address) declare their keys with these, so one rule refuses a blank token,
a short one, a typo'd address or a ``~/`` path the same way everywhere, naming the key.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator, SecretStr

MIN_TOKEN_CHARS = 16  # a token people set by hand guards a chat or the ops view: not "x"


def _not_blank_token(value: SecretStr) -> SecretStr:
    secret = value.get_secret_value()
    if not secret.strip():
        # an unset variable in an env or compose file: read as "no token" it would switch
        # authentication off, so it is refused (leave the key out for "none")
        raise ValueError("is empty: set a long random token, or leave the key out")
    if len(secret) < MIN_TOKEN_CHARS:
        raise ValueError(
            f"is {len(secret)} characters, too short to be a secret: use at least "
            f"{MIN_TOKEN_CHARS} random ones (e.g. the output of `openssl rand -hex 24`)"
        )
    return value


def _not_blank_path(value: Any) -> Any:
    if isinstance(value, str) and not value.strip():
        # Path("") is ".": the working directory would become the gateway's root
        raise ValueError("is empty: name a directory, or leave the key out for the default")
    return _no_tilde(value)


def _not_blank_file(value: Any) -> Any:
    if isinstance(value, str) and not value.strip():
        # Path("") is ".", a directory: an unset variable would leave the gateway unlogged
        raise ValueError("is empty: name a file, or leave the key out for no log file")
    return _no_tilde(value)


def _no_tilde(value: Any) -> Any:
    """Nothing expands ``~`` here (TOML, a unit's Environment=): ``~/jazz`` would be a
    directory named ``~`` in the working directory."""
    if isinstance(value, str | os.PathLike) and os.fspath(value).startswith("~"):
        raise ValueError(
            "starts with '~', which is not expanded here (it would name a directory '~' in "
            "the working directory): give the full path, e.g. /srv/jazz-bridge"
        )
    return value


def _http_url(value: str) -> str:
    """An http(s) address with a host: a typo (``http://[::1/bot``, ``api.telegram.org``)
    is named here, by ``config check`` too, not as a traceback when the client is made."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise ValueError(f"is not a valid address ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// address with a host")
    return value


def _not_blank_template(value: Any) -> Any:
    if isinstance(value, str) and not value.strip():
        # Path("") is ".": the working directory would seed every new home
        raise ValueError("is empty: name the template directory, or leave the key out for none")
    return _no_tilde(value)


def _existing_directory(value: Path) -> Path:
    """A directory that is there, named by the path itself (not through a link: nothing in
    or at a home template is followed; see provisioning.template)."""
    try:
        st = os.lstat(value)
    except FileNotFoundError:
        raise ValueError(
            f"{value} does not exist: make the directory (config.json, agents/) or fix the path"
        ) from None
    except OSError as exc:
        raise ValueError(f"{value} cannot be looked at ({exc.strerror or exc})") from None
    if stat.S_ISLNK(st.st_mode):
        raise ValueError(
            f"{value} is a symbolic link: name the real directory ({os.path.realpath(value)})"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{value} is not a directory")
    return value


# a platform's or the daemon's base address
HttpUrl = Annotated[str, AfterValidator(_http_url)]
# a bearer token people set by hand: never empty nor short (SecretStr, printed masked)
Token = Annotated[SecretStr, AfterValidator(_not_blank_token)]
# a directory setting: never empty, never ~/...
DirPath = Annotated[Path, BeforeValidator(_not_blank_path)]
# a file setting: never empty (the working directory), never ~/...
FilePath = Annotated[Path, BeforeValidator(_not_blank_file)]
# a directory that must exist at load: never empty, never ~/..., never a link
ExistingDir = Annotated[
    Path, BeforeValidator(_not_blank_template), AfterValidator(_existing_directory)
]
