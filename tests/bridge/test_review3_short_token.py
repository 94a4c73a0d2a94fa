"""A hand-set token too short to be a secret is refused with a line that says so.

``web.token = "x"`` (or ``ops.token``) was taken: a chat or the operators' view guarded by
a password anyone guesses. ``config check`` and ``serve`` now refuse it, naming the key
and its length, never the token.
"""

from __future__ import annotations

import pytest

from bridge.config import MIN_TOKEN_CHARS, load_settings
from bridge.errors import ConfigError
from bridge.plugins import load_specs


@pytest.mark.parametrize("key", ["JAZZ_BRIDGE_WEB__TOKEN", "JAZZ_BRIDGE_OPS__TOKEN"])
def test_a_short_token_is_refused_naming_the_key_not_the_token(key: str) -> None:
    short = "pa55word"
    sections = {name: spec.settings_model for name, spec in load_specs().items()}
    with pytest.raises(ConfigError) as caught:
        load_settings(None, adapter_sections=sections, environ={key: short})
    text = str(caught.value)
    section = key.removeprefix("JAZZ_BRIDGE_").split("__")[0].lower()
    assert f"{section}.token" in text and f"is {len(short)} characters" in text, text
    assert short not in text, "the token itself was printed"
    settings = load_settings(None, adapter_sections=sections, environ={key: "k" * MIN_TOKEN_CHARS})
    assert settings is not None
