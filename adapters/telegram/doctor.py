"""``jazz-bridge doctor``'s Telegram checks: the token works, the webhook is where it belongs.

Called through :attr:`bridge.ports.AdapterSpec.doctor` (the core never imports an adapter)
with the ``[telegram]`` section. ``getMe`` proves the token; ``getWebhookInfo`` shows where
Telegram delivers updates: in webhook mode it must be ``telegram.webhook_url``, in polling
mode no webhook may be set (Telegram refuses ``getUpdates`` while one is). The webhook
secret and the allowlist are rules of the configuration (``spec.check``), which doctor
reports with serve's own words. No secret goes into a line (the core masks the token in
anything reported, a URL included).
"""

from __future__ import annotations

from telegram import Bot
from telegram.error import InvalidToken, NetworkError, TelegramError

from bridge.ports import DoctorCheck

from .spec import TelegramSettings
from .transport import AiohttpRequest, env_proxy

AUTH_FIX = "set telegram.token to the token @BotFather gave the bot (/token there shows it)"
WEBHOOK_FIX = "start the gateway (it calls setWebhook) or check telegram.webhook_url"
POLLING_FIX = (
    "start the gateway (in polling mode it calls deleteWebhook) or set telegram.mode = "
    '"webhook" with telegram.webhook_url'
)


async def check(settings: TelegramSettings) -> list[DoctorCheck]:
    if settings.token is None:
        return [DoctorCheck(False, "telegram token set", AUTH_FIX)]
    bot = Bot(
        settings.token.get_secret_value(),
        base_url=settings.api_url,
        base_file_url=settings.resolved_file_url,
        request=AiohttpRequest(pool_size=1, proxy=env_proxy(settings.api_url)),
        get_updates_request=AiohttpRequest(pool_size=1, proxy=env_proxy(settings.api_url)),
    )
    try:
        return await _checks(bot, settings)
    finally:
        await bot.shutdown()  # closes the HTTP connections initialize() opened


async def _checks(bot: Bot, settings: TelegramSettings) -> list[DoctorCheck]:
    try:
        await bot.initialize()  # getMe: raises InvalidToken when Telegram refuses the token
        me = bot.bot
    except InvalidToken:
        return [DoctorCheck(False, "telegram token valid (getMe: refused)", AUTH_FIX)]
    except NetworkError as exc:
        return [
            DoctorCheck(
                False,
                f"telegram Bot API at {settings.api_url} reachable ({type(exc).__name__})",
                "check the network and telegram.api_url",
            )
        ]
    except TelegramError as exc:
        return [DoctorCheck(False, f"telegram token valid (getMe: {exc.message})", AUTH_FIX)]
    checks = [DoctorCheck(True, f"telegram token valid (bot @{me.username}, id {me.id})")]
    try:
        info = await bot.get_webhook_info()
    except TelegramError as exc:
        checks.append(
            DoctorCheck(
                False,
                f"telegram webhook state readable (getWebhookInfo: {type(exc).__name__})",
                "check the network and telegram.api_url",
            )
        )
        return checks
    current = info.url or "none"
    if settings.resolved_mode == "webhook":
        if info.url and info.url == settings.webhook_url:
            line = f"telegram webhook registered at {info.url}"
            if info.last_error_message:
                line += f" (last delivery error: {info.last_error_message})"
            checks.append(DoctorCheck(True, line))
        else:
            checks.append(
                DoctorCheck(
                    False,
                    f"telegram webhook registered at {settings.webhook_url} (is: {current})",
                    WEBHOOK_FIX,
                )
            )
    else:
        checks.append(
            DoctorCheck(
                not info.url,
                f"telegram no webhook set in polling mode (is: {current}; getUpdates is "
                "refused while one is)",
                POLLING_FIX,
            )
        )
    return checks
