"""How the gateway's log lines look, and the guarantee that no secret reaches them.

Everything the gateway logs goes through the pieces here, one module each:

- :mod:`.formats`: JSON lines for machines, a readable line on a terminal, the ``extra=``
  fields as data;
- :mod:`.masking`: what counts as a secret (each ``SecretStr`` of the settings, every value
  of ``runner.extra_env``, secret-looking environment variables, URLs' passwords) and the
  :class:`SecretMasker` that replaces them everywhere in a record;
- :mod:`.handlers`: :func:`install` puts a format and the masker on each handler, :func:`mask`
  masks what is written outside logging;
- :mod:`.logfile`: the log file, capped, following its path, never readable by "other";
- :mod:`.writer`: the writer thread, so a blocked write never stops the event loop;
- :mod:`.records`: a record's ``extra=`` fields, and its message frozen to text.

The names below are the package's API: import them from ``bridge.logs``.
"""

from __future__ import annotations

from .formats import (
    TEXT_FORMAT,
    JsonFormatter,
    LogFormat,
    TextFormatter,
    formatter_for,
    is_terminal,
)
from .handlers import install, mask
from .logfile import LOG_FILE_MODE, CappedFileHandler
from .masking import (
    MASK,
    MIN_SECRET_LEN,
    SECRET_ENV_HINTS,
    SECRET_ENV_SUFFIX,
    SECRET_VALUES,
    SecretMasker,
    SecretValues,
    is_secret_env_name,
    is_secret_field,
    mask_url_credentials,
    secret_values,
    url_secrets,
)
from .records import extra_fields
from .writer import off_thread, stop_writer

__all__ = [
    "LOG_FILE_MODE",
    "MASK",
    "MIN_SECRET_LEN",
    "SECRET_ENV_HINTS",
    "SECRET_ENV_SUFFIX",
    "SECRET_VALUES",
    "TEXT_FORMAT",
    "CappedFileHandler",
    "JsonFormatter",
    "LogFormat",
    "SecretMasker",
    "SecretValues",
    "TextFormatter",
    "extra_fields",
    "formatter_for",
    "install",
    "is_secret_env_name",
    "is_secret_field",
    "is_terminal",
    "mask",
    "mask_url_credentials",
    "off_thread",
    "secret_values",
    "stop_writer",
    "url_secrets",
]
