"""The settings as a whole: :class:`CoreSettings` and where its values come from.

Sources, strongest first: ``JAZZ_BRIDGE_<SECTION>__<KEY>`` environment variables, then the
TOML file, then the defaults. A table's entries may be given one variable each, with the
entry's name kept as written (:class:`_TableEntries`); :func:`settings_class` adds one
section per adapter.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError, create_model
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from ..errors import ConfigError
from .sections import (
    AccountsSettings,
    LimitsSettings,
    LogSettings,
    OpsSettings,
    ProgressSettings,
    RetentionSettings,
    RunnerSettings,
    ServerSettings,
)
from .types import DirPath

ENV_PREFIX = "JAZZ_BRIDGE_"
CONFIG_ENV = "JAZZ_BRIDGE_CONFIG"
DEFAULT_CONFIG_FILE = "jazz-bridge.toml"
DEFAULT_ROOT = "jazz-bridge-home"


class CoreSettings(BaseSettings):
    """Keys the core owns. Adapter sections are added by :func:`settings_class`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        case_sensitive=False,
    )

    root: DirPath = Path(DEFAULT_ROOT)
    operator_group: str | None = None
    isolation: Literal["auto", "on", "off"] = "auto"
    server: ServerSettings = ServerSettings()
    runner: RunnerSettings = RunnerSettings()
    limits: LimitsSettings = LimitsSettings()
    progress: ProgressSettings = ProgressSettings()
    accounts: AccountsSettings = AccountsSettings()
    log: LogSettings = LogSettings()
    ops: OpsSettings = OpsSettings()
    retention: RetentionSettings = RetentionSettings()

    _toml_file: Path | None = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = getattr(settings_cls, "_toml_path", None)
        environ = getattr(settings_cls, "_environ", None)
        sources: list[PydanticBaseSettingsSource] = [init_settings]
        if isinstance(env_settings, EnvSettingsSource):
            env = os.environ if environ is None else environ
            entries, rest = _table_entries(env, settings_cls.model_fields)
            # the per-entry variables are taken as written, not lower-cased with the rest;
            # listed first, a single entry's variable wins over the table's JSON form
            env_settings.env_vars = {k.lower(): v for k, v in rest.items()}
            sources.append(_TableEntries(settings_cls, entries))
        sources.append(env_settings)
        if toml_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
        return tuple(sources)

    def section(self, name: str) -> Any:
        return getattr(self, name, None)


class _TableEntries(PydanticBaseSettingsSource):
    """A table's entries given one variable each (``JAZZ_BRIDGE_RUNNER__EXTRA_ENV__NAME``),
    with each entry's name exactly as written.

    The settings are case-insensitive, so pydantic-settings would lower-case the entry's
    name with the rest of the variable: ``OPENAI_API_KEY`` would reach every run as
    ``openai_api_key``, which on Unix is another variable, and the key would do nothing.
    """

    def __init__(self, settings_cls: type[BaseSettings], entries: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self.entries = entries

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.entries.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return self.entries


def _table_fields(fields: Mapping[str, FieldInfo]) -> dict[str, tuple[str, ...]]:
    """The variable prefix (``JAZZ_BRIDGE_RUNNER__EXTRA_ENV__``) of each table setting
    (a dict: ``runner.extra_env``), top-level or in a section, mapped to its place."""
    found: dict[str, tuple[str, ...]] = {}
    for name, info in fields.items():
        if typing.get_origin(info.annotation) is dict:
            found[f"{ENV_PREFIX}{name.upper()}__"] = (name,)
        model = section_model(info.annotation)
        for key, inner in (model.model_fields if model is not None else {}).items():
            if typing.get_origin(inner.annotation) is dict:
                found[f"{ENV_PREFIX}{name.upper()}__{key.upper()}__"] = (name, key)
    return found


def _table_entries(
    environ: Mapping[str, str], fields: Mapping[str, FieldInfo]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Split off the variables that set one entry of a table: the entries as nested data
    (``{"runner": {"extra_env": {"OPENAI_API_KEY": ...}}}``, names as written), and the
    other variables."""
    tables = _table_fields(fields)
    entries: dict[str, Any] = {}
    rest: dict[str, str] = {}
    for name, value in environ.items():
        prefix = next((p for p in tables if name.upper().startswith(p)), None)
        if prefix is None:
            rest[name] = value
            continue
        entry = name[len(prefix) :]
        if not entry:
            raise ConfigError(
                f"{name}: names no entry of {'.'.join(tables[prefix])}: put the entry's name "
                f"after the two underscores ({prefix}OPENAI_API_KEY=...), or give the "
                f'whole table as JSON ({prefix[:-2]}=\'{{"OPENAI_API_KEY": "..."}}\')'
            )
        place = entries
        for part in tables[prefix]:
            place = place.setdefault(part, {})
        place[entry] = value
    return entries, rest


def settings_class(adapter_sections: Mapping[str, type[BaseModel]]) -> type[CoreSettings]:
    """CoreSettings plus one optional section per adapter.

    A section whose model has fields without defaults (a third party's adapter may) has no
    empty default: it is None until configured, and the adapter is then off.
    """
    fields: dict[str, Any] = {}
    for name, model in sorted(adapter_sections.items()):
        try:
            fields[name] = (model, model())
        except ValidationError:
            fields[name] = (model | None, None)
    return create_model("Settings", __base__=CoreSettings, **fields)


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The section model of a settings field (``Model`` or ``Model | None``), else None."""
    for kind in (annotation, *typing.get_args(annotation)):
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            return kind
    return None
