"""``jazz-bridge doctor`` asks the (fake) Slack Web API: ``auth.test`` proves the bot token,
and in Socket Mode ``apps.connections.open`` proves the app token. ``config check`` and
``doctor`` refuse what ``serve`` refuses, in its words."""

from __future__ import annotations

import asyncio
import subprocess

import pytest
from fake_slack_api import FakeSlackApi
from gateway_harness import run_cli
from slack_support import APP_TOKEN, BOT_TOKEN, SECRET

from adapters.slack.doctor import APP_AUTH_FIX, BOT_AUTH_FIX, NETWORK_FIX, check
from adapters.slack.spec import SlackSettings
from bridge.cli.parser import EXIT_CONFIG

WRONG = "xoxb-0000000000-a-token-the-fake-refuses"


async def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    # in a thread: the fake Slack API answers from this test's event loop
    return await asyncio.to_thread(run_cli, env, *args)


async def test_doctor_checks_the_bot_token_with_auth_test(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    init = await cli(env, "init")
    assert init.returncode == 0, init.stderr
    ok = await cli(env, "doctor")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    lines = ok.stdout.splitlines()
    assert "OK   slack bot token valid (team Example T0TEAM0001, bot @jazz U0BOT00001)" in lines
    assert "OK   configuration is valid" in lines  # the signing secret's rule among them
    assert len(fake.called("auth.test")) == 1

    bad = await cli({**env, "JAZZ_BRIDGE_SLACK__BOT_TOKEN": WRONG}, "doctor")
    assert bad.returncode == 1
    assert (
        f"FAIL slack bot token valid (auth.test: invalid_auth) -> {BOT_AUTH_FIX}"
        in bad.stdout.splitlines()
    )
    assert [line for line in bad.stdout.splitlines() if line.startswith("FAIL")] == [
        f"FAIL slack bot token valid (auth.test: invalid_auth) -> {BOT_AUTH_FIX}"
    ]
    assert WRONG not in bad.stdout + bad.stderr and SECRET not in bad.stdout + bad.stderr


async def test_socket_mode_needs_a_valid_app_token(fake: FakeSlackApi) -> None:
    base = {"bot_token": BOT_TOKEN, "api_url": fake.api_url, "mode": "socket"}
    # none set: a rule of the configuration (spec.check), not a question for Slack
    [bot] = await check(SlackSettings.model_validate(base))
    assert bot.ok and not fake.called("apps.connections.open")
    [_, valid] = await check(SlackSettings.model_validate({**base, "app_token": APP_TOKEN}))
    assert valid.ok and valid.what == "slack app token valid (socket mode)"
    assert fake.called("apps.connections.open")
    [_, refused] = await check(
        SlackSettings.model_validate({**base, "app_token": "xapp-1-A0APP00001-wrong"})
    )
    assert not refused.ok and "apps.connections.open: invalid_auth" in refused.what
    assert refused.fix == APP_AUTH_FIX


async def test_an_unreachable_api_fails_with_the_fix(fake: FakeSlackApi) -> None:
    fake.fail("auth.test", "drop")
    [bot] = await check(
        SlackSettings.model_validate(
            {"bot_token": BOT_TOKEN, "api_url": fake.api_url, "signing_secret": SECRET}
        )
    )
    assert not bot.ok and "unreachable" in bot.what and bot.fix == NETWORK_FIX


ERROR = "jazz-bridge: error: "


@pytest.mark.parametrize(
    ("broken", "says"),
    [
        ({"JAZZ_BRIDGE_SLACK__ALLOW_EVERYONE": "false"}, "slack has no allowlist: "),
        # set but blank (an unset variable in a unit file): an HMAC key anyone can sign with
        ({"JAZZ_BRIDGE_SLACK__SIGNING_SECRET": "  "}, "slack.signing_secret is required "),
    ],
)
async def test_config_check_and_doctor_refuse_what_serve_refuses(
    env: dict[str, str], fake: FakeSlackApi, broken: dict[str, str], says: str
) -> None:
    init = await cli(env, "init")
    assert init.returncode == 0, init.stderr
    refused = {**env, **broken}
    served = await cli(refused, "serve")
    assert served.returncode == EXIT_CONFIG, served.stderr[-2000:]
    refusal = served.stderr.strip().splitlines()[-1]
    assert refusal.startswith(ERROR + says), refusal
    checked = await cli(refused, "config", "check")
    assert checked.returncode == EXIT_CONFIG, checked.stdout + checked.stderr
    assert checked.stderr.strip().splitlines()[-1] == refusal  # the same line serve gives
    assert not checked.stdout  # no effective configuration printed as if it were fine
    doctor = await cli(refused, "doctor")
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert [line for line in doctor.stdout.splitlines() if line.startswith("FAIL")] == [
        f"FAIL configuration is valid -> {refusal.removeprefix(ERROR)}"
    ]
    assert SECRET not in served.stderr + checked.stderr + doctor.stdout


async def test_an_allowlist_or_allow_everyone_is_accepted(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    init = await cli(env, "init")
    assert init.returncode == 0, init.stderr
    no_list = {**env, "JAZZ_BRIDGE_SLACK__ALLOW_EVERYONE": "false"}
    assert (await cli(no_list, "config", "check")).returncode == EXIT_CONFIG
    for allowed in (
        {"JAZZ_BRIDGE_SLACK__ALLOWED_TEAMS": '["T0TEAM0001"]'},
        {"JAZZ_BRIDGE_SLACK__ALLOWED_CHANNELS": '["C0CHAN0001"]'},
        {"JAZZ_BRIDGE_SLACK__ALLOWED_USERS": '["U0USER0001"]'},
        {"JAZZ_BRIDGE_SLACK__ALLOW_EVERYONE": "true"},
    ):
        configured = {**no_list, **allowed}
        checked = await cli(configured, "config", "check")
        assert checked.returncode == 0, (allowed, checked.stderr)
        doctor = await cli(configured, "doctor")
        assert doctor.returncode == 0, (allowed, doctor.stdout + doctor.stderr)
        assert "OK   configuration is valid" in doctor.stdout.splitlines()
    # a Slack that is off is not held to its rules (the web chat on loopback: serve starts)
    off = await cli({**no_list, "JAZZ_BRIDGE_SLACK__ENABLED": "false"}, "config", "check")
    assert off.returncode == 0, off.stderr
