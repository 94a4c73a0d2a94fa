"""The guarantee that no secret reaches a log line: what counts as a secret, and its masking.

:class:`SecretMasker` sits on every handler and replaces the value of every configured
secret (each ``SecretStr`` in the settings, adapter sections included, every value of
``runner.extra_env``, a URL's password) and of secret-looking environment variables wherever
it appears: the message, its arguments, extra fields and tracebacks. A Telegram token inside
a URL an HTTP library logs is masked like any other, and so is the password of any URL. A
secret a length cap cut before it was masked (a run's stderr lines shown in the chat) is
masked up to the cut: its first characters ending a line, or its last ones starting one.

The same rules mask what is not a log line: ``config check``'s printout (bridge.config) and
the CLI's last error line (:func:`bridge.logs.mask`).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, SecretStr

from .records import extra_fields, freeze

MASK = "***"
# Shorter values would mask ordinary words; real tokens and secrets are far longer.
MIN_SECRET_LEN = 6
# Environment variables whose values are treated as secrets: names (upper-cased) holding one
# of these, or ending in SECRET_ENV_SUFFIX (AZURE_OPENAI_KEY, which runs are given by name)
SECRET_ENV_HINTS = ("TOKEN", "SECRET", "PASSWORD", "API_KEY", "ACCESS_KEY")
SECRET_ENV_SUFFIX = "KEY"  # noqa: S105  # a part of a name, not a secret
# The user information of a URL (``scheme://user:password@host``); it cannot hold / ? # @
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#@\s]+)@")


class SecretValues:
    """Marks a settings field whose every value is a secret: ``Annotated[dict[str, str],
    SECRET_VALUES]`` (``runner.extra_env``, which is passed to runs and holds provider keys).
    Each string in it, a table's values included, is masked like a ``SecretStr``'s: in log
    lines and in ``config check``."""

    def __repr__(self) -> str:
        return "SECRET_VALUES"


SECRET_VALUES = SecretValues()


def url_secrets(text: str) -> list[str]:
    """The credentials of each URL in ``text``: its password, or its user name when it has
    no password (a token given as the user name)."""
    found = []
    if "://" in text and "@" in text:
        for match in _URL_USERINFO.finditer(text):
            user, colon, password = match.group("userinfo").partition(":")
            secret = password if colon else user
            if secret:
                found.append(secret)
    return found


def mask_url_credentials(text: str) -> str:
    """``text`` with the credentials of each URL masked (``https://user:***@host``)."""
    if "://" not in text or "@" not in text:
        return text

    def masked(match: re.Match[str]) -> str:
        user, colon, _password = match.group("userinfo").partition(":")
        return f"{match.group('scheme')}{f'{user}:{MASK}' if colon else MASK}@"

    return _URL_USERINFO.sub(masked, text)


def is_secret_field(info: Any) -> bool:
    """Whether a pydantic field's values are all secrets (:data:`SECRET_VALUES`)."""
    return any(item is SECRET_VALUES for item in getattr(info, "metadata", ()))


class SecretMasker(logging.Filter):
    """Replace every known secret value in a record before any handler formats it."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        # longest first, so a secret containing another is masked whole
        self.secrets = sorted(
            {s for s in secrets if len(s) >= MIN_SECRET_LEN}, key=len, reverse=True
        )

    def mask(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        for secret in self.secrets:
            text = _mask_cut_tail(_mask_cut_head(text, secret), secret)
        return mask_url_credentials(text)  # a URL's password, however short or unknown

    def _mask_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.mask(value)
        if isinstance(value, bytes | bytearray):
            return self.mask(bytes(value).decode("utf-8", "replace"))
        if isinstance(value, int | float | bool) or value is None:
            return value
        if isinstance(value, Mapping | list | tuple | set):
            # masked leaf by leaf before dumping: json.dumps escapes a secret holding a quote,
            # a backslash or a non-ASCII letter, so it would no longer be found in the text
            # (and a reader's JSON decoder would turn the escapes back into the secret)
            return self.mask(json.dumps(self._masked_tree(value)))
        return self.mask(str(value))

    def _masked_tree(self, value: Any) -> Any:
        """``value`` with every string in it (a table's keys too) masked, as JSON data."""
        if isinstance(value, str | bytes | bytearray):
            return self._mask_value(value)
        if isinstance(value, int | float | bool) or value is None:
            return value
        if isinstance(value, Mapping):
            # a key JSON takes as it is (str, number, None), else as masked text
            return {self._mask_value(k): self._masked_tree(v) for k, v in value.items()}
        if isinstance(value, list | tuple | set):
            return [self._masked_tree(item) for item in value]
        return self.mask(str(value))

    def filter(self, record: logging.LogRecord) -> bool:
        freeze(record)  # the masked text is what gets printed
        record.msg = self.mask(record.msg)
        for key, value in extra_fields(record).items():
            try:
                masked = self._mask_value(value)
            except Exception:  # no text (a str() that raises, a list holding itself): a
                # raise here would end the writer thread, and every later line with it
                masked = f"<unprintable {type(value).__name__}>"
            setattr(record, key, masked)
        if record.exc_text:
            record.exc_text = self.mask(record.exc_text)
        if record.stack_info:
            record.stack_info = self.mask(record.stack_info)
        return True


def _mask_cut_head(text: str, secret: str) -> str:
    """``text`` with the beginning of ``secret`` masked where it ends a line: what a length
    cap applied before masking (a run's stderr line) kept of it."""
    head = secret[:MIN_SECRET_LEN]
    start = text.find(head)
    while start != -1:
        end = text.find("\n", start)
        end = len(text) if end == -1 else end
        if secret.startswith(text[start:end]):
            text = text[:start] + MASK + text[end:]
            start = text.find(head, start + len(MASK))
        else:
            start = text.find(head, start + 1)
    return text


def _mask_cut_tail(text: str, secret: str) -> str:
    """``text`` with the end of ``secret`` masked where it starts a line: what a cap keeping
    the end of a text (the last lines a run wrote) kept of it."""
    tail = secret[-MIN_SECRET_LEN:]
    found = text.find(tail)
    while found != -1:
        begin = text.rfind("\n", 0, found) + 1
        stop = found + len(tail)
        if secret.endswith(text[begin:stop]):
            text = text[:begin] + MASK + text[stop:]
            found = text.find(tail, begin + len(MASK))
        else:
            found = text.find(tail, found + 1)
    return text


def secret_values(settings: BaseModel | None, environ: Mapping[str, str] | None = None) -> set[str]:
    """Every secret the settings hold (all sections): each ``SecretStr``, every value of a
    :data:`SECRET_VALUES` field, the credentials of each URL; and from the environment the
    values of secret-looking names and the credentials of URLs (a proxy's password)."""
    found: set[str] = set()

    def walk(value: Any, secret: bool = False) -> None:
        if isinstance(value, SecretStr):
            found.add(value.get_secret_value())
        elif isinstance(value, str):
            if secret:
                found.add(value)
            found.update(url_secrets(value))
        elif isinstance(value, BaseModel):
            for name, info in type(value).model_fields.items():
                walk(getattr(value, name, None), secret or is_secret_field(info))
        elif isinstance(value, Mapping):
            for item in value.values():
                walk(item, secret)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item, secret)

    if settings is not None:
        walk(settings)
    env = os.environ if environ is None else environ
    for name, value in env.items():
        if is_secret_env_name(name):
            found.add(value)
        found.update(url_secrets(value))
    return {s for s in found if len(s) >= MIN_SECRET_LEN}


def is_secret_env_name(name: str) -> bool:
    """Whether an environment variable's name says its value is a secret."""
    upper = name.upper()
    return upper.endswith(SECRET_ENV_SUFFIX) or any(hint in upper for hint in SECRET_ENV_HINTS)
