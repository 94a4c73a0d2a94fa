"""A webhook secret short enough to guess is refused: Telegram takes 1-256 characters, and
``abc12`` let anyone who guesses it post updates as any user; python-telegram-bot also logs
it at DEBUG, where a secret that short cannot be masked apart from ordinary words."""

from __future__ import annotations

import pytest

from adapters.telegram.spec import check
from bridge.config import load_settings
from bridge.plugins import load_specs

BASE = {
    "JAZZ_BRIDGE_TELEGRAM__TOKEN": "123456:AAE-a-bot-token-for-the-check",
    "JAZZ_BRIDGE_TELEGRAM__MODE": "webhook",
    "JAZZ_BRIDGE_TELEGRAM__WEBHOOK_URL": "https://bot.example/telegram/webhook",
    "JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE": "true",
}


@pytest.mark.parametrize(("secret", "refused"), [("abc12", True), ("k" * 16, False)])
def test_a_short_webhook_secret_is_refused(secret: str, refused: bool) -> None:
    sections = {name: spec.settings_model for name, spec in load_specs().items()}
    env = {**BASE, "JAZZ_BRIDGE_TELEGRAM__WEBHOOK_SECRET": secret}
    settings = load_settings(None, adapter_sections=sections, environ=env)
    problems = check(settings.telegram, settings)  # type: ignore[attr-defined]
    said = [p for p in problems if "webhook_secret" in p]
    assert bool(said) is refused, problems
    assert all(secret not in p for p in said), "the secret itself was printed"
