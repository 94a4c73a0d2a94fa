"""The Slack adapter's spec and settings (imported cheaply: slack-bolt is not)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SecretStr

from bridge.ports import Adapter, AdapterContext, AdapterSpec


class SlackSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True  # switched on only when a bot token is set as well
    mode: Literal["http", "socket"] = "http"
    bot_token: SecretStr | None = None  # xoxb-...
    signing_secret: SecretStr | None = None  # required in HTTP mode
    app_token: SecretStr | None = None  # xapp-..., required in socket mode
    api_url: str = "https://slack.com/api/"  # AsyncWebClient(base_url=...): proxies, tests
    # Each list that is set must contain the message's team / channel / user (DM channel
    # ids included in allowed_channels); with none set, allow_everyone must be true.
    allowed_teams: list[str] = []
    allowed_channels: list[str] = []
    allowed_users: list[str] = []
    allow_everyone: bool = False
    operators: list[str] = []  # user ids that may stop others' runs
    max_file_bytes: int = 50 * 1024 * 1024  # per downloaded file (the core's cap also applies)


def _factory(ctx: AdapterContext) -> Adapter:
    from .adapter import SlackAdapter

    return SlackAdapter(ctx)


def _enabled(settings: Any) -> bool:
    return bool(settings.enabled and settings.bot_token is not None)


SPEC = AdapterSpec(
    name="slack",
    section="slack",
    settings_model=SlackSettings,
    factory=_factory,
    enabled=_enabled,
)
