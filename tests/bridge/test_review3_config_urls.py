"""Platform and daemon addresses are checked with the configuration: a typo is named by
``config check`` with its key, not found as a traceback (or a silent failure to connect)
when the client is made."""

from __future__ import annotations

import pytest

from bridge.config import load_settings
from bridge.errors import ConfigError
from bridge.plugins import load_specs


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("JAZZ_BRIDGE_TELEGRAM__API_URL", "http://[::1/bot", "Invalid IPv6 URL"),
        ("JAZZ_BRIDGE_TELEGRAM__FILE_URL", "ftp://files.example/bot", "http:// or https://"),
        ("JAZZ_BRIDGE_SLACK__API_URL", "slack.com/api/", "http:// or https://"),
        ("JAZZ_BRIDGE_SLACK__API_URL", "https://slack.com:api/", "not a valid address"),
        ("JAZZ_BRIDGE_RUNNER__DAEMON_URL", "http:///runs", "with a host"),
    ],
)
def test_a_bad_address_is_named_with_its_key(key: str, value: str, why: str) -> None:
    sections = {name: spec.settings_model for name, spec in load_specs().items()}
    with pytest.raises(ConfigError) as caught:
        load_settings(None, adapter_sections=sections, environ={key: value})
    dotted = key.removeprefix("JAZZ_BRIDGE_").replace("__", ".").lower()
    assert dotted in str(caught.value) and why in str(caught.value), caught.value


def test_the_defaults_and_local_addresses_are_taken() -> None:
    sections = {name: spec.settings_model for name, spec in load_specs().items()}
    env = {
        "JAZZ_BRIDGE_TELEGRAM__API_URL": "http://[::1]:8081/bot",
        "JAZZ_BRIDGE_SLACK__API_URL": "http://127.0.0.1:9999/api/",
    }
    assert load_settings(None, adapter_sections=sections, environ=env) is not None
    assert load_settings(None, adapter_sections=sections, environ={}) is not None
