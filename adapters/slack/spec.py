"""The Slack adapter's spec and settings (imported cheaply: slack-bolt is not)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from bridge.config import CoreSettings, HttpUrl
from bridge.ports import Adapter, AdapterContext, AdapterSpec, DoctorCheck, changed_keys

from .links import LINKS

# What the Slack app must subscribe to and be granted (deploy/slack/manifest*.yaml are
# checked against these by a test): the events the adapter turns into messages, and one
# scope per thing it does.
BOT_EVENTS = frozenset(
    {"app_mention", "message.channels", "message.groups", "message.im", "message.mpim"}
)
BOT_SCOPES = {
    "app_mentions:read": "app_mention: a mention starts a conversation in a thread",
    "channels:history": "message.channels, and conversations.replies after an unclear post",
    "groups:history": "message.groups (private channels)",
    "im:history": "message.im (DMs), and conversations.history after an unclear post",
    "mpim:history": "message.mpim (group DMs)",
    "chat:write": "postMessage, update, postEphemeral, assistant.threads.setStatus",
    "files:read": "downloading files shared with a message (files.info when sent by id)",
    "files:write": "files_upload_v2 of the agent's artifacts",
    "commands": "the /jazz slash command",
}
SLASH_COMMAND = "/jazz"


class SlackSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True  # switched on only when a bot token is set as well
    mode: Literal["http", "socket"] = "http"
    bot_token: SecretStr | None = None  # xoxb-...
    signing_secret: SecretStr | None = None  # required in HTTP mode
    app_token: SecretStr | None = None  # xapp-..., required in socket mode
    api_url: HttpUrl = "https://slack.com/api/"  # AsyncWebClient(base_url=...): proxies, tests
    # seconds a Web API call may take before it counts as failed (an unclear post is then
    # looked up by its reply key before it is sent again)
    api_timeout_s: int = Field(default=30, ge=1)
    # Each list that is set must contain the message's team / channel / user (DM channel
    # ids included in allowed_channels; the team is the sender's own workspace, an external
    # one in a Slack Connect channel); with none set, allow_everyone must be true.
    allowed_teams: list[str] = []
    allowed_channels: list[str] = []
    allowed_users: list[str] = []
    allow_everyone: bool = False
    operators: list[str] = []  # user ids that may stop others' runs
    max_file_bytes: int = 50 * 1024 * 1024  # per downloaded file (the core's cap also applies)


def _factory(ctx: AdapterContext) -> Adapter:
    from .adapter import SlackAdapter

    return SlackAdapter(ctx)


async def _doctor(settings: Any) -> list[DoctorCheck]:
    from .doctor import check

    return await check(settings)


def _enabled(settings: Any) -> bool:
    return bool(settings.enabled and settings.bot_token is not None)


def check(settings: SlackSettings, core: CoreSettings) -> list[str]:
    """What serve refuses to start Slack without (``AdapterSpec.check``), one line each."""
    found = []
    if settings.mode == "http" and not (
        settings.signing_secret and settings.signing_secret.get_secret_value().strip()
    ):
        # an empty secret would be an HMAC key anyone can sign with
        found.append(
            "slack.signing_secret is required in HTTP mode (JAZZ_BRIDGE_SLACK__SIGNING_SECRET"
            '; the app\'s Basic Information page), or set slack.mode = "socket"'
        )
    if settings.mode == "socket" and settings.app_token is None:
        found.append(
            "slack.app_token (an xapp- token with connections:write) is required in socket "
            "mode (JAZZ_BRIDGE_SLACK__APP_TOKEN)"
        )
    if not (
        settings.allow_everyone
        or settings.allowed_teams
        or settings.allowed_channels
        or settings.allowed_users
    ):
        # with no list set, the lists would let in anyone
        found.append(
            "slack has no allowlist: set slack.allowed_teams, slack.allowed_channels or "
            "slack.allowed_users (e.g. JAZZ_BRIDGE_SLACK__ALLOWED_TEAMS='[\"T0123\"]'), or "
            "slack.allow_everyone = true"
        )
    return found


def dormant(settings: Any) -> list[str]:
    """Why a slack section with settings stays off (``AdapterSpec.dormant``): no bot_token."""
    if not settings.enabled or settings.bot_token is not None:
        return []
    keys = [k for k in changed_keys(settings) if k != "enabled"]
    if not keys:
        return []
    return [
        f"slack is configured ({', '.join(keys)}) but has no bot token: set "
        "slack.bot_token (JAZZ_BRIDGE_SLACK__BOT_TOKEN); it stays off"
    ]


SPEC = AdapterSpec(
    name="slack",
    route_prefix="/slack/",
    links=LINKS,
    section="slack",
    settings_model=SlackSettings,
    factory=_factory,
    enabled=_enabled,
    doctor=_doctor,
    check=check,
    dormant=dormant,
)
