"""Who may use the bot on Slack: the allowlists (``slack.allowed_teams``, ``allowed_channels``,
``allowed_users``, or ``allow_everyone``) and the configuration errors that keep the gateway
from starting. A member of another organisation in a Slack Connect channel is not in the
installing workspace's allowlist; someone left out who presses a button or types ``/jazz``
is told so (an ephemeral message, the command's own ack), the conversation untouched."""

from __future__ import annotations

import copy

import pytest
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway, wait_until
from slack_support import (
    ADA,
    GRACE,
    TEAM,
    action,
    buttons,
    event,
    mention,
    posted_ts,
    posts,
    press_payload,
    sample,
    send,
    slash_form,
    stored,
    vector,
    wait_post,
)

from bridge.errors import AdapterError

EXTERNAL_TEAM, EXTERNAL_USER = "T0EXTERN01", "U0EXTERN01"


def only_ada(env: dict[str, str]) -> None:
    """Only Ada allowed (no ``allow_everyone``)."""
    env.pop("JAZZ_BRIDGE_SLACK__ALLOW_EVERYONE")
    env["JAZZ_BRIDGE_SLACK__ALLOWED_USERS"] = f'["{ADA}"]'


def slash(text: str, user: str) -> bytes:
    return slash_form(
        text,
        channel_name="general",
        user=user,
        user_name="someone",
        trigger=f"trigger-parity-{user}",
    )


async def test_allowlists_and_configuration_errors(env: dict[str, str], fake: FakeSlackApi) -> None:
    no_list = dict(env, JAZZ_BRIDGE_SLACK__ALLOW_EVERYONE="false")
    with pytest.raises(AdapterError, match=r"slack\.allowed_teams"):
        async with running_gateway(no_list):
            pass
    no_secret = {k: v for k, v in env.items() if k != "JAZZ_BRIDGE_SLACK__SIGNING_SECRET"}
    # unset, or set to nothing (an unset variable in a unit file): an empty HMAC key is one
    # anyone can sign with, so the gateway does not start with it
    for secret in (None, "", "   "):
        configured = (
            no_secret
            if secret is None
            else {**no_secret, "JAZZ_BRIDGE_SLACK__SIGNING_SECRET": secret}
        )
        with pytest.raises(AdapterError, match=r"slack\.signing_secret"):
            async with running_gateway(configured):
                pass
    for key, value in (
        ("ALLOWED_TEAMS", '["T0OTHER"]'),
        ("ALLOWED_CHANNELS", '["C0OTHER"]'),
        ("ALLOWED_USERS", f'["{GRACE}"]'),
    ):
        limited = dict(no_list, **{f"JAZZ_BRIDGE_SLACK__{key}": value})
        async with running_gateway(limited) as (app, _client):
            assert await event(app.port, vector("app_mention")) == 200  # Ada in C0CHAN0001
            assert (
                sample(app, "jazz_bridge_messages_total", platform="slack", outcome="denied") == 1
            )
            assert await stored(app) == 0
    assert not fake.called("chat.postMessage")
    ada_only = dict(no_list, JAZZ_BRIDGE_SLACK__ALLOWED_USERS=f'["{ADA}"]')
    async with running_gateway(ada_only) as (app, _client):
        assert await event(app.port, vector("app_mention")) == 200
        await wait_post(fake, "summarize yesterday")


async def test_an_external_member_of_a_shared_channel_is_not_in_allowed_teams(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    env["JAZZ_BRIDGE_SLACK__ALLOW_EVERYONE"] = "false"
    env["JAZZ_BRIDGE_SLACK__ALLOWED_TEAMS"] = f'["{TEAM}"]'
    body = copy.deepcopy(vector("app_mention"))
    body["event_id"] = "Ev0RVEXT01"
    body["is_ext_shared_channel"] = True
    body["event"].update(
        user=EXTERNAL_USER,
        team=EXTERNAL_TEAM,
        user_team=EXTERNAL_TEAM,
        source_team=EXTERNAL_TEAM,
        ts="1764690000.000100",
        event_ts="1764690000.000100",
    )
    async with running_gateway(env) as (app, _client):
        assert await event(app.port, body) == 200
        denied = sample(app, "jazz_bridge_messages_total", platform="slack", outcome="denied")
        assert (denied, await stored(app)) == (1, 0), (
            f"a member of {EXTERNAL_TEAM} was let in by allowed_teams=[{TEAM}] "
            f"(denied={denied}, stored={await stored(app)})"
        )


async def test_a_press_by_someone_not_allowed_is_told_so(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    only_ada(env)
    async with running_gateway(env) as (app, _client):
        asked = mention("Ev0PARITY1", "!approve bash", ts="1764669800.000100")
        assert await event(app.port, asked) == 200
        (prompt,) = await wait_post(fake, "Approval needed")
        approve = next(b for b in buttons(prompt) if b["text"]["text"] == "Approve")
        ts = posted_ts(fake, prompt)

        assert await action(app.port, press_payload(approve["value"], GRACE, prompt, ts)) == 200
        await wait_until(
            lambda: bool(fake.called("chat.postEphemeral")), 10, "a word to the presser"
        )
        (told,) = fake.called("chat.postEphemeral")
        assert told.args["user"] == GRACE and "not allowed" in told.args["text"]
        assert told.args["thread_ts"] == "1764669800.000100"
        assert not posts(fake, "approved")  # Grace's press answered nothing

        assert await action(app.port, press_payload(approve["value"], ADA, prompt, ts)) == 200
        await wait_post(fake, "bash")  # Ada's own press still answers it


async def test_jazz_from_someone_not_allowed_is_told_so(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    only_ada(env)
    async with running_gateway(env) as (app, _client):
        status, text = await send(app.port, slash("status", GRACE), form=True)
        assert status == 200, (status, text)
        assert "not allowed" in text, text
