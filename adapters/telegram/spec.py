"""The Telegram adapter's spec and settings (imported cheaply: python-telegram-bot is not)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SecretStr

from bridge.ports import Adapter, AdapterContext, AdapterSpec, DoctorCheck


class TelegramSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True  # switched on only when a token is set as well
    token: SecretStr | None = None
    mode: Literal["webhook", "polling"] | None = None  # default: webhook when webhook_url set
    webhook_url: str | None = None
    webhook_secret: SecretStr | None = None  # required in webhook mode
    api_url: str = "https://api.telegram.org/bot"  # the bot's base_url; the token is appended
    file_url: str | None = None  # default: derived from api_url (".../bot" -> ".../file/bot")
    allowed_chats: list[int | str] = []
    allowed_users: list[int | str] = []
    allow_everyone: bool = False
    operators: list[int | str] = []  # user ids that may /stop others' runs
    group_trigger: Literal["mention", "all"] = "mention"
    poll_timeout_s: int = 30  # long polling timeout of getUpdates
    min_send_interval_s: float = 1.0  # per chat: about one message a second

    @property
    def resolved_mode(self) -> Literal["webhook", "polling"]:
        if self.mode is not None:
            return self.mode
        return "webhook" if self.webhook_url else "polling"

    @property
    def resolved_file_url(self) -> str:
        if self.file_url:
            return self.file_url
        base = self.api_url.rstrip("/")
        if base.endswith("/bot"):
            return base[: -len("/bot")] + "/file/bot"
        return base + "/file/bot"


def _factory(ctx: AdapterContext) -> Adapter:
    from .adapter import TelegramAdapter

    return TelegramAdapter(ctx)


async def _doctor(settings: Any) -> list[DoctorCheck]:
    from .doctor import check

    return await check(settings)


def _enabled(settings: Any) -> bool:
    return bool(settings.enabled and settings.token is not None)


SPEC = AdapterSpec(
    name="telegram",
    section="telegram",
    settings_model=TelegramSettings,
    factory=_factory,
    enabled=_enabled,
    doctor=_doctor,
)
