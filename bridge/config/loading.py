"""Loading the configuration: finding the file, reading it with the environment, and
refusing what cannot be used with every bad key named.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_settings import SettingsError

from ..errors import ConfigError
from .explain import check_env_names, describe, not_json
from .settings import CONFIG_ENV, DEFAULT_CONFIG_FILE, ENV_PREFIX, CoreSettings, settings_class


def _not_a_config_file(path: Path) -> str | None:
    """What is wrong with ``path`` as the config file (None: it is a file)."""
    if path.is_file():
        return None
    if path.is_dir():
        example = path / DEFAULT_CONFIG_FILE
        return f"{path}, which is a directory: name the TOML file itself (e.g. {example})"
    if path.exists():
        return f"{path}, which is not a regular file: name the TOML file"
    return f"{path}, which does not exist"


def find_config_file(explicit: Path | None, environ: Mapping[str, str]) -> Path | None:
    if explicit is not None:
        wrong = _not_a_config_file(explicit)
        if wrong is not None:
            raise ConfigError(f"--config names {wrong}")
        return explicit
    from_env = environ.get(CONFIG_ENV)
    if from_env:
        path = Path(from_env)
        wrong = _not_a_config_file(path)
        if wrong is not None:
            raise ConfigError(f"{CONFIG_ENV} names {wrong}")
        return path
    local = Path(DEFAULT_CONFIG_FILE)
    return local if local.is_file() else None


def load_settings(
    config_file: Path | None = None,
    *,
    adapter_sections: Mapping[str, type[BaseModel]] | None = None,
    environ: Mapping[str, str] | None = None,
) -> CoreSettings:
    """Load and validate the configuration; ConfigError names every bad key."""
    env = os.environ if environ is None else environ
    path = find_config_file(config_file, env)
    cls = settings_class(adapter_sections or {})
    file: tuple[Path, dict[str, Any]] | None = None
    if path is not None:
        try:
            file = (path, tomllib.loads(path.read_text(encoding="utf-8")))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    cls._toml_path = path  # type: ignore[attr-defined]
    origin = f"file {path}, environment {ENV_PREFIX}*" if path else f"environment {ENV_PREFIX}*"
    cls._environ = env  # type: ignore[attr-defined]
    check_env_names(env, cls.model_fields)
    try:
        settings = cls()
    except ValidationError as exc:
        raise ConfigError(describe(exc.errors(), origin, env, file, cls)) from None
    except SettingsError as exc:  # a list or table given as plain text in the environment
        raise ConfigError(not_json(exc, env, cls)) from None
    if settings.accounts.uid_min > settings.accounts.uid_max:
        raise ConfigError("accounts.uid_min must not be above accounts.uid_max")
    object.__setattr__(settings, "_toml_file", path)
    return settings
