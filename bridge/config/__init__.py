"""The gateway's configuration: one TOML file, every key overridable from the environment.

Sources, strongest first: ``JAZZ_BRIDGE_<SECTION>__<KEY>`` environment variables, then the
TOML file (``--config``, ``$JAZZ_BRIDGE_CONFIG``, or ``./jazz-bridge.toml``), then the
defaults, which are the embedded default: a home under the working directory, SQLite, the
local web chat on 127.0.0.1. Unknown keys and bad values are refused at start naming the
key; secrets are ``SecretStr`` and print masked. Adapter sections (``[slack]``,
``[telegram]``, ``[web]``) are declared by the adapters' specs, not here.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import stat
import tomllib
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, cast
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    create_model,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from ..errors import ConfigError
from ..logs import (
    SECRET_VALUES,
    SecretMasker,
    is_secret_field,
    mask_url_credentials,
    secret_values,
)

ENV_PREFIX = "JAZZ_BRIDGE_"
CONFIG_ENV = "JAZZ_BRIDGE_CONFIG"
DEFAULT_CONFIG_FILE = "jazz-bridge.toml"
DEFAULT_ROOT = "jazz-bridge-home"


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


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerSettings(Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8787, ge=0, le=65535)
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    # every body being read at once, together (never under max_body_bytes), and requests
    # under way from one peer (a TLS proxy in front is one peer: keep room for its traffic)
    max_buffered_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    max_requests_per_peer: int = Field(default=256, ge=1)
    # connections open from one address (each costs a descriptor whether it sends or not);
    # 0: no limit. Behind a proxy, room for every connection it may open.
    max_connections_per_peer: int = Field(default=512, ge=0)
    shutdown_grace_s: float = Field(default=8.0, gt=0, le=60)


class RunnerSettings(Section):
    backend: Literal["cli", "daemon"] = "cli"
    command: list[str] | None = None  # default: `jazz` on PATH, else the reference runner
    agent: str = "default"
    # seeds each new conversation's home: config.json, agents/, personas/ (README)
    home_template: ExistingDir | None = None
    approval_policy: Literal["read-only", "low-risk", "high-risk"] = "low-risk"
    timeout_s: float = Field(default=900.0, gt=0)
    kill_grace_s: float = Field(default=3.0, ge=0, le=30)
    events: list[str] = ["tools", "reasoning", "text", "approval", "subagent", "spend"]
    env_passthrough: list[str] = []
    # passed to every run: provider keys (OPENAI_API_KEY...), so every value is a secret
    extra_env: Annotated[dict[str, str], SECRET_VALUES] = {}
    daemon_url: HttpUrl = "http://127.0.0.1:4747"
    daemon_token: SecretStr | None = None
    daemon_operator_token: SecretStr | None = None
    daemon_poll_s: float = Field(default=0.5, gt=0)


class LimitsSettings(Section):
    max_concurrent_runs: int = Field(default=4, ge=1)
    # runs one person, and one team or chat (bridge.model.thread_group), may have going at
    # once: each at most max_concurrent_runs (a larger value means that); 0: no cap of its
    # own. A run waiting for its person's answer still counts for the person, not the team
    max_runs_per_user: int = Field(default=2, ge=0)
    max_runs_per_team: int = Field(default=3, ge=0)
    max_queued_per_conversation: int = Field(default=5, ge=0)
    daily_cost_usd: float | None = Field(default=None, ge=0)
    max_attachment_bytes: int = Field(default=20 * 1024 * 1024, ge=0)
    # a prompt nobody answers this long is declined for the agent (a run waiting for its
    # person still counts against that person's max_runs_per_user); None: wait for ever
    prompt_wait_s: float | None = Field(default=3600.0, gt=0)
    # what one run may use (provisioning/rlimits.py); 0: the gateway's own limit. Processes
    # (and threads) count per conversation account: isolated runs only. Memory (address
    # space), CPU seconds and file size bound each process of a run
    run_max_processes: int = Field(default=512, ge=0)
    run_max_memory_bytes: int = Field(default=8 * 1024**3, ge=0)
    run_max_cpu_s: int = Field(default=1800, ge=0)
    run_max_file_bytes: int = Field(default=2 * 1024**3, ge=0)
    # a cgroup per run where the host lets the gateway make one (provisioning/cgroups.py):
    # run_max_memory_bytes and run_max_processes then also bound the whole run together
    run_cgroup: bool = True


class ProgressSettings(Section):
    first_after_s: float = Field(default=1.0, ge=0)
    still_working_every_s: float = Field(default=60.0, gt=0)


class AccountsSettings(Section):
    uid_min: int = Field(default=70000, ge=1000)
    uid_max: int = Field(default=79999, ge=1000)
    # new conversations (each one an account, kept) one person, and one team or chat, may
    # start in 24 hours; 0: no limit
    new_per_user_per_day: int = Field(default=50, ge=0)
    new_per_team_per_day: int = Field(default=500, ge=0)


class LogSettings(Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # "auto": JSON lines when stderr is not a terminal (journald, containers), text on one
    format: Literal["auto", "json", "text"] = "auto"
    file: FilePath | None = None
    max_bytes: int = Field(default=10 * 1024 * 1024, ge=4096)
    backups: int = Field(default=3, ge=0)


class OpsSettings(Section):
    token: Token | None = None  # the operator web view at /ops is off without it
    # mark the login cookie Secure (sent over https only) also when the request came in as
    # plain http: set it when /ops is reached through a TLS-terminating proxy
    secure_cookie: bool = False


class RetentionSettings(Section):
    records_days: float = Field(default=90.0, gt=0)
    sweep_every_s: float = Field(default=3600.0, gt=0)
    archive_idle_days: float | None = Field(default=None, gt=0)


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
        model = _section_model(info.annotation)
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


SECRET_HINTS = ("token", "secret", "password", "key")


def _env_source(loc: Sequence[Any], env_names: set[str]) -> str | None:
    """The ``JAZZ_BRIDGE_*`` variable that set the value at ``loc``, if one did (it wins
    over the file, so a bad value there is the variable's, not the file's)."""
    parts = [str(p) for p in loc]
    for end in range(len(parts), 0, -1):
        name = ENV_PREFIX + "__".join(parts[:end]).upper()
        if name in env_names:
            return name
    return None


def _in_file(loc: Sequence[Any], data: Mapping[str, Any]) -> bool:
    """Whether the TOML ``data`` sets the value at ``loc`` (or a table holding it)."""
    node: Any = data
    for part in loc:
        if not isinstance(node, Mapping) or str(part) not in node:
            return False
        node = node[str(part)]
        if not isinstance(node, Mapping):
            return True
    return True


def _describe(
    errors: Iterable[Any],
    origin: str,
    env: Mapping[str, str] | None = None,
    file: tuple[Path, Mapping[str, Any]] | None = None,
) -> str:
    """Every bad key on a line, its value unless it may be a secret, and where it was set:
    the ``JAZZ_BRIDGE_*`` variable (which wins over the file) or the file."""
    env_names = {name.upper() for name in env or {}}
    lines = []
    for err in errors:
        loc = err.get("loc", ())
        key = ".".join(str(p) for p in loc) or "(top level)"
        message = err.get("msg", "invalid")
        unknown = err.get("type") == "extra_forbidden"
        if unknown:
            message = "unknown key"
        shown = ""
        # an unknown key may be a secret's key mistyped (bot_tokne): its value never shows
        secret = any(h in key.lower() for h in SECRET_HINTS) or key.startswith("runner.extra_env")
        if not unknown and not secret and "input" in err:
            value = err["input"]
            if isinstance(value, str | int | float | bool) and len(repr(value)) < 80:
                shown = f" (got {mask_url_credentials(repr(value))})"
        source = _env_source(loc, env_names) if loc else None
        if source is not None:
            shown += f" [from {source}]"
        elif file is not None and loc and _in_file(loc, file[1]):
            shown += f" [from {file[0]}]"
        lines.append(f"  {key}: {message}{shown}")
    return f"invalid configuration ({origin}):\n" + "\n".join(lines)


def _section_model(annotation: Any) -> type[BaseModel] | None:
    """The section model of a settings field (``Model`` or ``Model | None``), else None."""
    for kind in (annotation, *typing.get_args(annotation)):
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            return kind
    return None


def _suggest(name: str, fields: Mapping[str, Any]) -> str | None:
    """The variable a ``JAZZ_BRIDGE_*`` name that names no setting was probably meant to be."""
    rest = name.upper()[len(ENV_PREFIX) :]
    first, _, key = rest.partition("__")
    first = first.lower()
    # a section and its key joined by one underscore: JAZZ_BRIDGE_TELEGRAM_TOKEN
    for section in sorted(fields, key=len, reverse=True):
        model = _section_model(fields[section].annotation)
        if model is None or key or not first.startswith(section + "_"):
            continue
        wanted = first[len(section) + 1 :]
        keys = sorted(model.model_fields)
        close = [wanted] if wanted in keys else difflib.get_close_matches(wanted, keys, n=1)
        if close:
            return f"{ENV_PREFIX}{section.upper()}__{close[0].upper()}"
    close = difflib.get_close_matches(first, sorted(fields), n=1)
    if not close:
        return None
    model = _section_model(fields[close[0]].annotation)
    if model is None:
        return f"{ENV_PREFIX}{close[0].upper()}"
    keys = sorted(model.model_fields)
    if key.lower() in keys:
        return f"{ENV_PREFIX}{close[0].upper()}__{key.upper()}"
    near = difflib.get_close_matches(key.lower(), keys, n=1) if key else []
    return f"{ENV_PREFIX}{close[0].upper()}__{near[0].upper() if near else 'KEY'}"


def _check_env_names(environ: Mapping[str, str], fields: Mapping[str, Any]) -> None:
    """A ``JAZZ_BRIDGE_*`` variable that names no setting is refused, naming it.

    pydantic-settings ignores such names, so a mistyped JAZZ_BRIDGE_ISOLATON=on (or a single
    underscore, JAZZ_BRIDGE_TELEGRAM_TOKEN) would leave the setting at its default unseen.
    """
    wrong = []
    for name in environ:
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper == CONFIG_ENV:
            continue
        first = upper[len(ENV_PREFIX) :].split("__")[0].lower()
        if first not in fields:
            suggestion = _suggest(name, fields)
            hint = f" (did you mean {suggestion}?)" if suggestion else ""
            wrong.append(f"  {name}: no setting {first!r}{hint}")
    if wrong:
        raise ConfigError(
            "environment variables that name no setting (sections and keys are joined by "
            "two underscores, e.g. JAZZ_BRIDGE_TELEGRAM__TOKEN):\n" + "\n".join(sorted(wrong))
        )


def _not_json(exc: SettingsError, environ: Mapping[str, str], cls: type[BaseModel]) -> str:
    """Which variable held a list or table that is not JSON (pydantic-settings names only
    the section)."""
    match = re.search(r'field "(\w+)"', str(exc))
    field = cls.model_fields.get(match.group(1)) if match else None
    section = field.annotation if field is not None else None
    suspects = []
    upper = {k.upper(): v for k, v in environ.items()}
    whole = f"{ENV_PREFIX}{match.group(1).upper()}" if match else ""
    if whole in upper:  # the whole section as one variable (JAZZ_BRIDGE_SERVER='...')
        try:
            json.loads(upper[whole])
        except ValueError:
            suspects.append(whole)
    if match and isinstance(section, type) and issubclass(section, BaseModel):
        for key, info in section.model_fields.items():
            if not _is_collection(info.annotation):
                continue
            name = f"{ENV_PREFIX}{match.group(1).upper()}__{key.upper()}"
            if name in upper:
                try:
                    json.loads(upper[name])
                except ValueError:
                    suspects.append(name)
    named = ", ".join(suspects) or f"a {ENV_PREFIX}* variable"
    return (
        f"invalid configuration (environment): {named}: a list or table in the environment "
        f"must be JSON, e.g. {ENV_PREFIX}SLACK__ALLOWED_TEAMS='[\"T0123\"]'"
    )


def _is_collection(annotation: Any) -> bool:
    """A list, tuple, set or dict type (also inside an Optional or a union)."""
    origin = typing.get_origin(annotation)
    if origin in (list, tuple, set, frozenset, dict):
        return True
    return any(_is_collection(arg) for arg in typing.get_args(annotation))


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
    _check_env_names(env, cls.model_fields)
    try:
        settings = cls()
    except ValidationError as exc:
        raise ConfigError(_describe(exc.errors(), origin, env, file)) from None
    except SettingsError as exc:  # a list or table given as plain text in the environment
        raise ConfigError(_not_json(exc, env, cls)) from None
    if settings.accounts.uid_min > settings.accounts.uid_max:
        raise ConfigError("accounts.uid_min must not be above accounts.uid_max")
    object.__setattr__(settings, "_toml_file", path)
    return settings


MASKED = "**********"  # how pydantic shows a SecretStr


def effective_config(settings: CoreSettings) -> dict[str, Any]:
    """The effective configuration as JSON-able data, secrets masked: each ``SecretStr``,
    every value of a field marked secret (``runner.extra_env``) and URLs' credentials; and
    each of those secrets wherever else it appears (a bot token in the webhook's path), as
    the log lines mask them."""
    masker = SecretMasker(secret_values(settings))
    return cast(
        dict[str, Any], _mask_text(_masked(settings, settings.model_dump(mode="json")), masker.mask)
    )


def _mask_text(data: Any, mask: Callable[[str], str]) -> Any:
    if isinstance(data, dict):
        return {k: _mask_text(v, mask) for k, v in data.items()}
    if isinstance(data, list):
        return [_mask_text(v, mask) for v in data]
    return mask(data) if isinstance(data, str) else data


def _masked(model: BaseModel, data: dict[str, Any]) -> dict[str, Any]:
    for name, info in type(model).model_fields.items():
        if name not in data:
            continue
        value = getattr(model, name, None)
        if is_secret_field(info):
            data[name] = _mask_all(data[name])
        elif isinstance(value, BaseModel) and isinstance(data[name], dict):
            data[name] = _masked(value, data[name])
        else:
            data[name] = _mask_urls(data[name])
    return data


def _mask_all(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _mask_all(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_mask_all(v) for v in data]
    return MASKED if isinstance(data, str) else data


def _mask_urls(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _mask_urls(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_mask_urls(v) for v in data]
    return mask_url_credentials(data) if isinstance(data, str) else data
