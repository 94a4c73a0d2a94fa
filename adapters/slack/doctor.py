"""``jazz-bridge doctor``'s Slack checks: the bot token works, and Socket Mode's app token.

Called through :attr:`bridge.ports.AdapterSpec.doctor` (the core never imports an adapter)
with the ``[slack]`` section. It asks Slack itself (``auth.test``, and in Socket Mode
``apps.connections.open`` with the app token, which only hands out a connection URL) with
the same client the adapter uses, at ``slack.api_url``. No secret goes into a line.
"""

from __future__ import annotations

from collections.abc import Awaitable

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bridge.ports import DoctorCheck

from .spec import SlackSettings

BOT_AUTH_FIX = (
    "set slack.bot_token to the app's Bot User OAuth Token (xoxb-..., OAuth & Permissions); "
    "reinstall the app to the workspace if it was revoked"
)
APP_AUTH_FIX = (
    "create an app-level token with the connections:write scope (Basic Information) "
    "and set slack.app_token (xapp-...)"
)


NETWORK_FIX = "check the network (a proxy?) and slack.api_url"


async def _call(
    call: Awaitable[AsyncSlackResponse], base_url: str, fix: str
) -> tuple[dict[str, object] | None, str, str]:
    """The method's answer, or None, why it failed (Slack's error code or the network's) and
    the fix (the token's when Slack refused it, the network's when Slack was not reached)."""
    try:
        resp = await call
    except SlackApiError as exc:
        return None, str(exc.response.get("error") or exc.response.status_code), fix
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        return None, f"{base_url} unreachable: {type(exc).__name__}", NETWORK_FIX
    return dict(resp.data) if isinstance(resp.data, dict) else {}, "", ""


async def check(settings: SlackSettings) -> list[DoctorCheck]:
    checks: list[DoctorCheck] = []
    if settings.bot_token is None:
        return [DoctorCheck(False, "slack bot token set", BOT_AUTH_FIX)]
    client = AsyncWebClient(
        token=settings.bot_token.get_secret_value(),
        base_url=settings.api_url,
        timeout=settings.api_timeout_s,
        retry_handlers=[],
    )
    data, error, fix = await _call(client.auth_test(), settings.api_url, BOT_AUTH_FIX)
    if data is None:
        checks.append(DoctorCheck(False, f"slack bot token valid (auth.test: {error})", fix))
    else:
        checks.append(
            DoctorCheck(
                True,
                f"slack bot token valid (team {data.get('team')} {data.get('team_id')}, "
                f"bot @{data.get('user')} {data.get('user_id')})",
            )
        )
    # a secret or token the mode needs but is not set is one of the spec's rules (spec.check),
    # which doctor reports with serve's own words; here only what Slack says of those set
    if settings.mode == "socket" and settings.app_token is not None:
        # the app-level token (its own connections:write scope, no bot scope): a separate
        # client, as the Socket Mode client uses
        app_client = AsyncWebClient(
            base_url=settings.api_url, timeout=settings.api_timeout_s, retry_handlers=[]
        )
        opened = app_client.apps_connections_open(app_token=settings.app_token.get_secret_value())
        data, error, fix = await _call(opened, settings.api_url, APP_AUTH_FIX)
        checks.append(
            DoctorCheck(
                data is not None,
                "slack app token valid (socket mode"
                + (")" if data is not None else f", apps.connections.open: {error})"),
                fix,
            )
        )
    return checks
