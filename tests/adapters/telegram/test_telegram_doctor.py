"""``jazz-bridge doctor`` asks the (fake) Bot API: getMe proves the token, getWebhookInfo
shows whether the webhook is where the configuration says (or absent, in polling mode).
``config check`` and ``doctor`` refuse what ``serve`` refuses, in its words."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from gateway_harness import run_cli
from tg_support import ADA, SECRET, TOKEN, FakeBotApi, running_gateway

from adapters.telegram.doctor import AUTH_FIX, POLLING_FIX, WEBHOOK_FIX, check
from adapters.telegram.spec import TelegramSettings
from bridge.cli.parser import EXIT_CONFIG

HOOK = "https://bridge.example/telegram/webhook"


async def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    # in a thread: the fake Bot API answers from this test's event loop
    return await asyncio.to_thread(run_cli, env, *args)


async def doctor(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return await cli(env, "doctor")


def settings(fake: FakeBotApi, **extra: object) -> TelegramSettings:
    fields: dict[str, object] = {
        "token": TOKEN,
        "api_url": fake.api_url,
        "webhook_url": HOOK,
        "webhook_secret": SECRET,
    }
    fields.update(extra)
    return TelegramSettings.model_validate(fields)


async def test_webhook_mode_fails_until_the_gateway_registers_it(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    [me, hook] = await check(settings(fake))  # the secret: a rule of the configuration
    assert me.ok and "bot @jazz_example_bot" in me.what
    assert not hook.ok and hook.what.endswith("(is: none)") and hook.fix == WEBHOOK_FIX

    # the fix it names works: the gateway registers the webhook, then doctor passes
    async with running_gateway(env):
        pass
    assert fake.webhook_url == HOOK
    out = await doctor(env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"OK   telegram webhook registered at {HOOK}" in out.stdout.splitlines()
    assert "OK   telegram token valid (bot @jazz_example_bot" in out.stdout
    assert TOKEN not in out.stdout + out.stderr

    fake.webhook_url = "https://elsewhere.example/hook"  # another deployment took it over
    moved = await doctor(env)
    assert moved.returncode == 1
    assert (
        f"FAIL telegram webhook registered at {HOOK} (is: https://elsewhere.example/hook)"
        f" -> {WEBHOOK_FIX}" in moved.stdout.splitlines()
    )


async def test_a_refused_token_fails_with_the_fix(env: dict[str, str], fake: FakeBotApi) -> None:
    [bad] = await check(settings(fake, token="123456:AAwrong-token-the-fake-refuses"))
    assert not bad.ok and "getMe: refused" in bad.what and bad.fix == AUTH_FIX
    wrong = "123456:AAwrong-token-the-fake-refuses"
    init = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "bridge.cli", "init"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert init.returncode == 0, init.stderr
    out = await doctor({**env, "JAZZ_BRIDGE_TELEGRAM__TOKEN": wrong})
    assert out.returncode == 1
    assert f"FAIL telegram token valid (getMe: refused) -> {AUTH_FIX}" in out.stdout.splitlines()
    assert wrong not in out.stdout + out.stderr
    assert not any(
        line.startswith("FAIL") and "telegram" not in line for line in out.stdout.splitlines()
    )


async def test_polling_mode_fails_while_a_webhook_is_set(fake: FakeBotApi) -> None:
    polling = settings(fake, mode="polling", webhook_url=None, webhook_secret=None)
    fake.webhook_url = HOOK  # left behind by an earlier webhook deployment
    [me, hook] = await check(polling)
    assert me.ok
    assert not hook.ok and f"(is: {HOOK};" in hook.what and hook.fix == POLLING_FIX
    fake.webhook_url = ""
    [_, clear] = await check(polling)
    assert clear.ok and "(is: none;" in clear.what


async def test_serve_with_a_refused_token_names_the_problem_not_the_token(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    wrong = "123456:AAH-revokedSECRETtoken_xyz"
    served = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "bridge.cli", "serve"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env, "JAZZ_BRIDGE_TELEGRAM__TOKEN": wrong},
    )
    assert served.returncode == 2, served.stderr[-2000:]
    last = served.stderr.strip().splitlines()[-1]
    assert last.startswith("jazz-bridge: error: telegram.token was refused"), last
    assert wrong not in served.stdout + served.stderr


ERROR = "jazz-bridge: error: "
POLLING = {"JAZZ_BRIDGE_TELEGRAM__MODE": "polling"}  # doctor needs no webhook registered


@pytest.mark.parametrize(
    ("broken", "says"),
    [
        (
            {**POLLING, "JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE": "false"},
            "telegram has no allowlist: ",
        ),
        (  # a space: setWebhook would refuse it
            {"JAZZ_BRIDGE_TELEGRAM__WEBHOOK_SECRET": "not a secret"},
            "telegram.webhook_secret must be 16-256 characters",
        ),
    ],
)
async def test_config_check_and_doctor_refuse_what_serve_refuses(
    env: dict[str, str], fake: FakeBotApi, broken: dict[str, str], says: str
) -> None:
    init = await cli(env, "init")
    assert init.returncode == 0, init.stderr
    refused = {**env, **broken}
    served = await cli(refused, "serve")
    assert served.returncode == EXIT_CONFIG, served.stderr[-2000:]
    refusal = served.stderr.strip().splitlines()[-1]
    assert refusal.startswith(ERROR + says), refusal
    assert not fake.called("getMe")  # refused before it asked Telegram anything
    checked = await cli(refused, "config", "check")
    assert checked.returncode == EXIT_CONFIG, checked.stdout + checked.stderr
    assert checked.stderr.strip().splitlines()[-1] == refusal  # the same line serve gives
    assert not checked.stdout
    out = await doctor(refused)
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"FAIL configuration is valid -> {refusal.removeprefix(ERROR)}" in (
        out.stdout.splitlines()
    )
    assert TOKEN not in served.stderr + checked.stderr + out.stdout


async def test_an_allowlist_or_allow_everyone_is_accepted(
    env: dict[str, str], fake: FakeBotApi
) -> None:
    init = await cli(env, "init")
    assert init.returncode == 0, init.stderr
    no_list = {**env, **POLLING, "JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE": "false"}
    assert (await cli(no_list, "config", "check")).returncode == EXIT_CONFIG
    for allowed in (
        {"JAZZ_BRIDGE_TELEGRAM__ALLOWED_USERS": f"[{ADA}]"},
        {"JAZZ_BRIDGE_TELEGRAM__ALLOWED_CHATS": "[-1001234567890]"},
        {"JAZZ_BRIDGE_TELEGRAM__ALLOW_EVERYONE": "true"},
    ):
        configured = {**no_list, **allowed}
        checked = await cli(configured, "config", "check")
        assert checked.returncode == 0, (allowed, checked.stderr)
        out = await doctor(configured)
        assert out.returncode == 0, (allowed, out.stdout + out.stderr)
        assert "OK   configuration is valid" in out.stdout.splitlines()
    # a Telegram that is off is not held to its rules (the web chat on loopback: serve starts)
    off = await cli({**no_list, "JAZZ_BRIDGE_TELEGRAM__ENABLED": "false"}, "config", "check")
    assert off.returncode == 0, off.stderr
