"""The web adapter's spec and settings (imported cheaply: no aiohttp routes built here)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, SecretStr

from bridge.ports import Adapter, AdapterContext, AdapterSpec


class WebSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    token: SecretStr | None = None  # required when the server is bound beyond loopback
    operators: list[str] = []  # web user names that may /stop others' runs


def _factory(ctx: AdapterContext) -> Adapter:
    from .adapter import WebAdapter

    return WebAdapter(ctx)


def _enabled(settings: Any) -> bool:
    return bool(settings.enabled)


SPEC = AdapterSpec(
    name="web",
    section="web",
    settings_model=WebSettings,
    factory=_factory,
    enabled=_enabled,
)
