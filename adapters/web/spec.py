"""The web adapter's spec and settings (imported cheaply: no aiohttp routes built here)."""

from __future__ import annotations

import ipaddress
from typing import Any

from pydantic import BaseModel, ConfigDict

from bridge.config import CoreSettings, Token
from bridge.ports import Adapter, AdapterContext, AdapterSpec


class WebSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    token: Token | None = None  # required when the server is bound beyond loopback
    operators: list[str] = []  # web user names that may /stop others' runs
    # mark the page's login cookie Secure (sent over https only) also when the request came
    # in as plain http: set it when the chat is reached through a TLS-terminating proxy
    # (as ops.secure_cookie does for /ops)
    secure_cookie: bool = False


def _factory(ctx: AdapterContext) -> Adapter:
    from .adapter import WebAdapter

    return WebAdapter(ctx)


def _enabled(settings: Any) -> bool:
    return bool(settings.enabled)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, no port) can only be reached from this machine."""
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check(settings: WebSettings, core: CoreSettings) -> list[str]:
    """What serve refuses to start the web chat with (``AdapterSpec.check``), one line each."""
    host = core.server.host
    if settings.token is None and not is_loopback(host):
        return [
            f"the web chat is bound to {host}, beyond loopback, without a token: set "
            "web.token (JAZZ_BRIDGE_WEB__TOKEN) or bind server.host to 127.0.0.1"
        ]
    return []


SPEC = AdapterSpec(
    name="web",
    route_prefix="/api/",
    section="web",
    settings_model=WebSettings,
    factory=_factory,
    enabled=_enabled,
    check=check,
)
