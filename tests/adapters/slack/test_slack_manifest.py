"""deploy/slack's app manifests ask for exactly what the adapter handles and uses."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.slack.adapter import EVENTS_PATH
from adapters.slack.spec import BOT_EVENTS, BOT_SCOPES, SLASH_COMMAND

DEPLOY = Path(__file__).resolve().parents[3] / "deploy" / "slack"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / name).read_text())
    return data


@pytest.mark.parametrize("name", ["manifest.yaml", "manifest-socket.yaml"])
def test_events_scopes_and_the_slash_command_match_the_adapter(name: str) -> None:
    manifest = load(name)
    settings = manifest["settings"]
    assert set(settings["event_subscriptions"]["bot_events"]) == BOT_EVENTS
    scopes = manifest["oauth_config"]["scopes"]["bot"]
    assert len(scopes) == len(set(scopes))
    assert set(scopes) == set(BOT_SCOPES)
    (command,) = manifest["features"]["slash_commands"]
    assert command["command"] == SLASH_COMMAND
    assert settings["interactivity"]["is_enabled"] is True
    assert manifest["features"]["app_home"]["messages_tab_enabled"] is True  # DMs
    assert manifest["features"]["bot_user"]["display_name"]


def test_http_mode_sends_everything_to_the_events_route() -> None:
    manifest = load("manifest.yaml")
    settings = manifest["settings"]
    urls = [
        settings["event_subscriptions"]["request_url"],
        settings["interactivity"]["request_url"],
        manifest["features"]["slash_commands"][0]["url"],
    ]
    assert all(u.startswith("https://") and u.endswith(EVENTS_PATH) for u in urls)
    assert settings["socket_mode_enabled"] is False


def test_socket_mode_variant_has_no_request_urls() -> None:
    manifest = load("manifest-socket.yaml")
    settings = manifest["settings"]
    assert settings["socket_mode_enabled"] is True
    assert "request_url" not in settings["event_subscriptions"]
    assert "request_url" not in settings["interactivity"]
    assert "url" not in manifest["features"]["slash_commands"][0]
    http = load("manifest.yaml")
    assert manifest["oauth_config"] == http["oauth_config"]
    assert manifest["display_information"] == http["display_information"]


# Slack's documented bot scope for each Web API method the adapter calls (by the Python
# client's method name); auth.test needs none. A new call without an entry fails below.
METHOD_SCOPES = {
    "auth_test": None,
    "chat_postMessage": "chat:write",
    "chat_update": "chat:write",
    "chat_postEphemeral": "chat:write",
    "assistant_threads_setStatus": "chat:write",
    "conversations_replies": "channels:history",  # and groups/im/mpim:history by channel
    "conversations_history": "channels:history",
    "files_upload_v2": "files:write",
    "files_info": "files:read",  # a file shared as "check_file_info" (only its id)
}


def test_every_web_api_call_of_the_adapter_has_its_scope() -> None:
    source = "\n".join(
        p.read_text() for p in (DEPLOY.parents[1] / "adapters" / "slack").glob("*.py")
    )
    called = set(re.findall(r"\bclient\.([a-z]+_[A-Za-z0-9_]+)\(", source))
    assert "chat_postMessage" in called  # the pattern finds the calls
    unknown = called - set(METHOD_SCOPES)
    assert not unknown, f"add the scopes of {sorted(unknown)} to METHOD_SCOPES and the manifest"
    needed = {scope for m, scope in METHOD_SCOPES.items() if m in called and scope}
    assert needed <= set(BOT_SCOPES)
