"""``telegram.operators`` took "@name" but matched only numeric ids: an operator set by
username was silently not one (their Stop and /stop on another's run were refused). It now
matches a username as ``telegram.allowed_users`` does (case-insensitive, the @ optional in
Telegram's sense: "@Grace" is the user whose username is "grace"). An entry that is neither
an id nor an @username ("grace", "t.me/grace"), which no allowlist or operator list could
ever match, is refused when the config is loaded, naming the key and the value.

The real gateway and PTB client against the fake Bot API (webhook); every wait bounded.
"""

from __future__ import annotations

import pytest
from tg_support import (
    ADA,
    BOT_NAME,
    GRACE,
    GROUP,
    GROUP_CHAT,
    Call,
    FakeBotApi,
    buttons,
    mention,
    post,
    press,
    running_gateway,
    sent_to,
    update,
    wait_sent,
    wait_until,
)

from adapters.telegram.spec import SPEC
from bridge.config import load_settings
from bridge.errors import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")

GRACE_FROM = {"id": GRACE, "is_bot": False, "first_name": "Grace", "username": "grace"}


def with_stop(fake: FakeBotApi) -> list[Call]:
    return [c for c in sent_to(fake, GROUP) if c.params.get("reply_markup")]


async def test_an_operator_named_by_username_may_stop_anothers_run(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    env["JAZZ_BRIDGE_TELEGRAM__OPERATORS"] = '["@Grace"]'
    async with running_gateway(env) as (app, _client):
        # Ada's run, stopped by Grace's press on its Stop button
        assert await post(app.port, mention(730043001, GROUP_CHAT, ADA, "!delay 20")) == 200
        await wait_until(lambda: bool(with_stop(fake)), 15, "a progress bubble with Stop")
        pressed = press(730043002, GRACE, GROUP_CHAT, buttons(with_stop(fake)[0])["Stop"])
        pressed["callback_query"]["from"] = GRACE_FROM
        assert await post(app.port, pressed) == 200
        await wait_sent(fake, GROUP, "Stopped by Grace")
        # Ada's next run, stopped by Grace's /stop
        assert await post(app.port, mention(730043003, GROUP_CHAT, ADA, "!delay 20")) == 200
        await wait_until(lambda: len(with_stop(fake)) >= 2, 15, "a second progress bubble")
        stop = update(730043004, GROUP_CHAT, GRACE, f"/stop@{BOT_NAME}")
        stop["message"]["from"] = GRACE_FROM
        assert await post(app.port, stop) == 200
        await wait_sent(fake, GROUP, "Stopped by Grace", count=2)


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
