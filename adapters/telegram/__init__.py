"""Telegram: private chats, groups and forum topics, through python-telegram-bot.

Updates arrive on ``POST /telegram/webhook`` (the gateway's own aiohttp server) or by long
polling driven by the adapter itself; either way each one is persisted by the core before
Telegram is acknowledged (or the polling offset moves on).
"""

from .spec import SPEC, TelegramSettings

__all__ = ["SPEC", "TelegramSettings"]
