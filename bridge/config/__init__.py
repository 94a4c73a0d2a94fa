"""The gateway's configuration: one TOML file, every key overridable from the environment.

Sources, strongest first: ``JAZZ_BRIDGE_<SECTION>__<KEY>`` environment variables, then the
TOML file (``--config``, ``$JAZZ_BRIDGE_CONFIG``, or ``./jazz-bridge.toml``), then the
defaults, which are the embedded default: a home under the working directory, SQLite, the
local web chat on 127.0.0.1. Unknown keys and bad values are refused at start naming the
key; secrets are ``SecretStr`` and print masked. Adapter sections (``[slack]``,
``[telegram]``, ``[web]``) are declared by the adapters' specs, not here.

One module per job:

- :mod:`.types`: the shared value types (``Token``, ``HttpUrl``, ``DirPath``...);
- :mod:`.sections`: the core's sections and their defaults;
- :mod:`.settings`: :class:`CoreSettings`, its sources, and the adapters' sections added;
- :mod:`.loading`: finding the file and :func:`load_settings`;
- :mod:`.explain`: what a refused configuration's message says;
- :mod:`.effective`: the effective configuration, secrets masked, for ``config check``.

The names below are the package's API: import them from ``bridge.config``.
"""

from __future__ import annotations

from .effective import MASKED, effective_config
from .explain import SECRET_HINTS
from .loading import find_config_file, load_settings
from .sections import (
    AccountsSettings,
    LimitsSettings,
    LogSettings,
    OpsSettings,
    ProgressSettings,
    RetentionSettings,
    RunnerSettings,
    Section,
    ServerSettings,
)
from .settings import (
    CONFIG_ENV,
    DEFAULT_CONFIG_FILE,
    DEFAULT_ROOT,
    ENV_PREFIX,
    CoreSettings,
    settings_class,
)
from .types import MIN_TOKEN_CHARS, DirPath, ExistingDir, FilePath, HttpUrl, Token

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_CONFIG_FILE",
    "DEFAULT_ROOT",
    "ENV_PREFIX",
    "MASKED",
    "MIN_TOKEN_CHARS",
    "SECRET_HINTS",
    "AccountsSettings",
    "CoreSettings",
    "DirPath",
    "ExistingDir",
    "FilePath",
    "HttpUrl",
    "LimitsSettings",
    "LogSettings",
    "OpsSettings",
    "ProgressSettings",
    "RetentionSettings",
    "RunnerSettings",
    "Section",
    "ServerSettings",
    "Token",
    "effective_config",
    "find_config_file",
    "load_settings",
    "settings_class",
]
