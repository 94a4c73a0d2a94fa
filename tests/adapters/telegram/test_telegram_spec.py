"""The Telegram adapter's settings (adapters/telegram/spec.py): a webhook secret short enough
to guess is refused (Telegram takes 1-256 characters; python-telegram-bot logs it at DEBUG,
where a secret that short cannot be masked), never printed; and an operator or allowlist
entry no one could match (a bare name, a link, "@") is refused at load, naming the setting
and the ``@username`` form, while ids and usernames load."""

from __future__ import annotations

import pytest
from tg_support import ADA, GRACE, GROUP

from adapters.telegram.spec import SPEC, check
from bridge.config import load_settings
from bridge.errors import ConfigError
from bridge.plugins import load_specs

# PTB 22 itself warns when it builds a RetryAfter (its type becomes timedelta in v23)
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


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


@pytest.mark.parametrize("key", ["OPERATORS", "ALLOWED_USERS", "ALLOWED_CHATS"])
@pytest.mark.parametrize("bad", ["grace", "t.me/grace", "@", "12 34"])
def test_an_entry_no_one_could_match_is_refused_at_load(key: str, bad: str) -> None:
    environ = {f"JAZZ_BRIDGE_TELEGRAM__{key}": f'[{ADA}, "{bad}"]'}
    with pytest.raises(ConfigError) as refused:
        load_settings(None, adapter_sections={"telegram": SPEC.settings_model}, environ=environ)
    message = str(refused.value)
    assert f"telegram.{key.lower()}" in message and repr(bad) in message, message
    assert "@username" in message, message


def test_ids_and_usernames_still_load() -> None:
    environ = {
        "JAZZ_BRIDGE_TELEGRAM__OPERATORS": f'[{ADA}, "@Grace", " {GRACE} "]',
        "JAZZ_BRIDGE_TELEGRAM__ALLOWED_CHATS": f'[{GROUP}, "{GROUP}", "@ops_team"]',
    }
    loaded = load_settings(
        None, adapter_sections={"telegram": SPEC.settings_model}, environ=environ
    )
    assert len(loaded.telegram.operators) == 3  # type: ignore[attr-defined]
    assert len(loaded.telegram.allowed_chats) == 3  # type: ignore[attr-defined]
