"""How a configuration that cannot be used is told: every bad key on a line, where it was
set, and the variable a mistyped name was probably meant to be.

A refused start is read by an operator fixing a file or a unit's environment, so the message
names the key, the value unless it may be a secret, and its source (the ``JAZZ_BRIDGE_*``
variable, which wins over the file, or the file).
"""

from __future__ import annotations

import difflib
import json
import re
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_settings import SettingsError

from ..errors import ConfigError
from ..logs import mask_url_credentials
from .settings import CONFIG_ENV, ENV_PREFIX, section_model

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


COLLECTION_ERRORS = ("list_type", "tuple_type", "set_type", "frozen_set_type", "dict_type")


def _keys_at(cls: type[BaseModel] | None, loc: Sequence[Any]) -> list[str]:
    """The keys the table holding ``loc``'s last part has (none when that is not a model)."""
    model: type[BaseModel] | None = cls
    for part in loc[:-1]:
        field = model.model_fields.get(str(part)) if model is not None else None
        model = section_model(field.annotation) if field is not None else None
    return sorted(model.model_fields) if model is not None else []


def _did_you_mean(cls: type[BaseModel] | None, loc: Sequence[Any]) -> str:
    if not loc:
        return ""
    close = difflib.get_close_matches(str(loc[-1]).lower(), _keys_at(cls, loc), n=1)
    return f" (did you mean {'.'.join([*map(str, loc[:-1]), close[0]])}?)" if close else ""


def json_example(value: str) -> str:
    """``value`` (a list written as plain text: ``111``, ``a,b``) as the JSON it should be."""
    items: list[Any] = []
    for item in (part.strip() for part in value.split(",")):
        if item:
            items.append(int(item) if item.lstrip("-").isdigit() else item)
    return json.dumps(items)


def _json_hint(name: str, value: str | None) -> str:
    example = json_example(value) if value is not None else '["T0123"]'
    return f": a list or table in an environment variable must be JSON, e.g. {name}='{example}'"


def describe(
    errors: Iterable[Any],
    origin: str,
    env: Mapping[str, str] | None = None,
    file: tuple[Path, Mapping[str, Any]] | None = None,
    cls: type[BaseModel] | None = None,
) -> str:
    """Every bad key on a line, its value unless it may be a secret, and where it was set:
    the ``JAZZ_BRIDGE_*`` variable (which wins over the file) or the file. An unknown key
    says which key of its table it was probably meant to be (``cls``: the settings' model);
    a list or table a variable gave as plain text says how to write it as JSON."""
    env_names = {name.upper() for name in env or {}}
    upper_env = {k.upper(): v for k, v in (env or {}).items()}
    lines = []
    for err in errors:
        loc = err.get("loc", ())
        key = ".".join(str(p) for p in loc) or "(top level)"
        message = err.get("msg", "invalid")
        unknown = err.get("type") == "extra_forbidden"
        if unknown:
            message = "unknown key" + _did_you_mean(cls, loc)
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
            if err.get("type") in COLLECTION_ERRORS:
                raw = upper_env.get(source)
                shown += _json_hint(source, None if secret else raw)
        elif file is not None and loc and _in_file(loc, file[1]):
            shown += f" [from {file[0]}]"
        lines.append(f"  {key}: {message}{shown}")
    return f"invalid configuration ({origin}):\n" + "\n".join(lines)


def _suggest(name: str, fields: Mapping[str, Any]) -> str | None:
    """The variable a ``JAZZ_BRIDGE_*`` name that names no setting was probably meant to be."""
    rest = name.upper()[len(ENV_PREFIX) :]
    first, _, key = rest.partition("__")
    first = first.lower()
    # a section and its key joined by one underscore: JAZZ_BRIDGE_TELEGRAM_TOKEN
    for section in sorted(fields, key=len, reverse=True):
        model = section_model(fields[section].annotation)
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
    model = section_model(fields[close[0]].annotation)
    if model is None:
        return f"{ENV_PREFIX}{close[0].upper()}"
    keys = sorted(model.model_fields)
    if key.lower() in keys:
        return f"{ENV_PREFIX}{close[0].upper()}__{key.upper()}"
    near = difflib.get_close_matches(key.lower(), keys, n=1) if key else []
    return f"{ENV_PREFIX}{close[0].upper()}__{near[0].upper() if near else 'KEY'}"


def check_env_names(environ: Mapping[str, str], fields: Mapping[str, Any]) -> None:
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


def not_json(exc: SettingsError, environ: Mapping[str, str], cls: type[BaseModel]) -> str:
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
    first = suspects[0] if suspects else f"{ENV_PREFIX}SLACK__ALLOWED_TEAMS"
    secret = any(h in first.lower() for h in SECRET_HINTS) or "EXTRA_ENV" in first
    value = upper.get(first) if suspects and not secret else None
    return f"invalid configuration (environment): {named}" + _json_hint(first, value)


def _is_collection(annotation: Any) -> bool:
    """A list, tuple, set or dict type (also inside an Optional or a union)."""
    origin = typing.get_origin(annotation)
    if origin in (list, tuple, set, frozenset, dict):
        return True
    return any(_is_collection(arg) for arg in typing.get_args(annotation))
