"""The Telegram adapter's spec and settings (imported cheaply: python-telegram-bot is not)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, SecretStr

from bridge.config import MIN_TOKEN_CHARS, CoreSettings, HttpUrl
from bridge.ports import Adapter, AdapterContext, AdapterSpec, DoctorCheck, changed_keys

from .links import LINKS

# what setWebhook accepts (1-256 of these), at least as long as any token people set by hand:
# a short one is guessed, and too short to be told from a word when logs are masked
WEBHOOK_SECRET = re.compile(rf"^[A-Za-z0-9_-]{{{MIN_TOKEN_CHARS},256}}$")


# an entry of an allowlist or of operators: a numeric id, or an @username (a chat's, a user's)
ID_OR_USERNAME = re.compile(r"^(-?[0-9]+|@[A-Za-z0-9_]+)$")


def _id_or_username(value: int | str) -> int | str:
    """An entry that is neither could never match anyone: it is refused, not ignored (an
    operator written as "grace" was silently no operator, a chat as "t.me/ops" never let in)."""
    if isinstance(value, str) and not ID_OR_USERNAME.match(value.strip()):
        raise ValueError(
            f"{value!r} is neither a numeric id (123456789, -100…) nor an @username ('@name')"
        )
    return value


IdOrUsername = Annotated[int | str, AfterValidator(_id_or_username)]


class TelegramSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True  # switched on only when a token is set as well
    token: SecretStr | None = None
    mode: Literal["webhook", "polling"] | None = None  # default: webhook when webhook_url set
    webhook_url: str | None = None
    webhook_secret: SecretStr | None = None  # required in webhook mode
    api_url: HttpUrl = "https://api.telegram.org/bot"  # the bot's base_url; the token is appended
    file_url: HttpUrl | None = None  # default: derived from api_url (".../bot" -> ".../file/bot")
    allowed_chats: list[IdOrUsername] = []  # ids, or a public chat's @username
    allowed_users: list[IdOrUsername] = []  # user ids or @usernames
    allow_everyone: bool = False
    # user ids (or @usernames, case-insensitive: an id is safer, a username can be changed
    # and then taken by someone else) that may /stop others' runs
    operators: list[IdOrUsername] = []
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


def check(settings: TelegramSettings, core: CoreSettings) -> list[str]:
    """What serve refuses to start Telegram without (``AdapterSpec.check``), one line each."""
    found = []
    if not (settings.allow_everyone or settings.allowed_chats or settings.allowed_users):
        found.append(
            "telegram has no allowlist: set telegram.allowed_chats or telegram.allowed_users "
            "(JAZZ_BRIDGE_TELEGRAM__ALLOWED_USERS='[123456]'), or telegram.allow_everyone = "
            "true to let anyone who finds the bot use it"
        )
    if settings.resolved_mode == "webhook":
        secret = settings.webhook_secret
        if secret is None:
            found.append(
                "telegram.webhook_secret (JAZZ_BRIDGE_TELEGRAM__WEBHOOK_SECRET) is required "
                "in webhook mode: Telegram sends it with every update"
            )
        elif not WEBHOOK_SECRET.match(secret.get_secret_value()):
            found.append(
                f"telegram.webhook_secret must be {MIN_TOKEN_CHARS}-256 characters of "
                "A-Z a-z 0-9 _ - (e.g. the output of `openssl rand -hex 24`)"
            )
    return found


def dormant(settings: Any) -> list[str]:
    """Why a telegram section with settings stays off (``AdapterSpec.dormant``): no token."""
    if not settings.enabled or settings.token is not None:
        return []
    keys = [k for k in changed_keys(settings) if k != "enabled"]
    if not keys:
        return []
    return [
        f"telegram is configured ({', '.join(keys)}) but has no token: set "
        "telegram.token (JAZZ_BRIDGE_TELEGRAM__TOKEN); it stays off"
    ]


SPEC = AdapterSpec(
    name="telegram",
    route_prefix="/telegram/",
    links=LINKS,
    section="telegram",
    settings_model=TelegramSettings,
    factory=_factory,
    enabled=_enabled,
    doctor=_doctor,
    check=check,
    dormant=dormant,
)
