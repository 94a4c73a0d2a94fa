"""The effective configuration as ``config check`` prints it: every value, no secret.

Secrets are masked by the rules the log lines follow (bridge.logs), so what the operator
sees printed is what a log line would show.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from pydantic import BaseModel

from ..logs import SecretMasker, is_secret_field, mask_url_credentials, secret_values
from .settings import CoreSettings

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
