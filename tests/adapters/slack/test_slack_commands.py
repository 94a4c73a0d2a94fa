"""The gateway's commands on Slack: ``!status``, ``!stop``, ``!help``, ``!new`` in a thread (Slack
keeps ``/`` for its own commands, in a DM as in a thread, and the help says so), and the
``/jazz`` slash command acting on the channel or DM it was typed in (``/jazz new <question>``
runs the question; one the gateway cannot store says so in its ack). The directive list
the bundled reference runner points to (``!help``-like) reaches the runner."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fake_slack_api import Call, FakeSlackApi
from full_disk_support import fill, refuses_writes
from gateway_harness import running_gateway, wait_until
from slack_support import (
    ADA,
    CHANNEL,
    DM,
    GRACE,
    MENTION_TS,
    action,
    buttons,
    event,
    mention,
    message,
    posted_ts,
    posts,
    press_payload,
    sample,
    seen,
    send,
    slash_form,
    vector,
    wait_post,
)


def dm_slash(text: str, trigger: str) -> bytes:
    """``/jazz`` from Ada in her DM with the bot."""
    return slash_form(text, channel=DM, channel_name="directmessage", trigger=trigger)


def _texts(fake: FakeSlackApi, contains: str) -> list[str]:
    return [str(c.args.get("markdown_text") or c.args.get("text")) for c in posts(fake, contains)]


async def test_stop_button_and_thread_commands(env: dict[str, str], fake: FakeSlackApi) -> None:
    async with running_gateway(env) as (app, _client):
        root = "1764669900.000100"
        assert await event(app.port, mention("Ev0SLOW", "!delay 30", ts=root)) == 200

        def bubble() -> list[Call]:
            return [c for c in fake.called("chat.postMessage") if buttons(c)]

        await wait_until(lambda: bool(bubble()), 15, "a progress message with a Stop button")
        (stop,) = buttons(bubble()[0])
        assert stop["text"]["text"] == "Stop" and bubble()[0].args["thread_ts"] == root
        await wait_until(lambda: bool(fake.called("chat.update")), 10, "a progress edit")
        assert fake.called("assistant.threads.setStatus")

        def thread_cmd(n: int, text: str, user: str = ADA) -> dict[str, Any]:
            return message(
                f"Ev0CMD{n}", text, user=user, ts=f"1764669901.00{n:04d}", thread_ts=root
            )

        assert await event(app.port, thread_cmd(1, "!status")) == 200
        (status,) = await wait_post(fake, "Running")
        assert status.args["thread_ts"] == root
        assert await event(app.port, thread_cmd(2, "!stop", user=GRACE)) == 200
        await wait_post(fake, "who started this run")  # Grace may not stop Ada's run
        assert await event(app.port, thread_cmd(3, "!help")) == 200
        await wait_post(fake, "`!new`")  # the help, in the form Slack lets through

        ts = posted_ts(fake, bubble()[0])
        assert await action(app.port, press_payload(stop["value"], ADA, bubble()[0], ts)) == 200
        await wait_post(fake, "Stopped by")
        await wait_until(
            lambda: any(
                c.args.get("ts") == ts and not buttons(c) for c in fake.called("chat.update")
            ),
            10,
            "the bubble closed without its button",
        )
        assert await event(app.port, thread_cmd(4, "!new")) == 200
        await wait_post(fake, "fresh conversation")
        assert await event(app.port, thread_cmd(5, "again\n!delay 0.1")) == 200
        (after,) = await wait_post(fake, "again")  # a runner directive still reaches the runner
        assert "Earlier turns in this conversation: 0" in after.args["markdown_text"]
        await wait_until(
            lambda: sample(app, "jazz_bridge_runs_total", outcome="ok") == 1, 20, "that run"
        )
        shown = len(bubble())
        assert await event(app.port, thread_cmd(6, "once more\n!delay 30")) == 200
        try:
            await wait_until(lambda: len(bubble()) > shown, 20, "another progress message")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the fake saw {seen(fake)}") from None
        assert await event(app.port, thread_cmd(7, "!stop")) == 200
        await wait_post(fake, "⏹️ Stopped.")
        await wait_post(fake, "Stopped by", count=2)


async def test_jazz_slash_command_acts_on_the_channel_or_dm(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):

        async def slash(text: str, channel: str = CHANNEL, n: int = 0) -> tuple[int, str]:
            name = "directmessage" if channel == DM else "incidents"
            body = slash_form(text, channel=channel, channel_name=name, trigger=f"trigger-{n}")
            return await send(app.port, body, form=True)

        status, text = await slash("help")
        assert status == 200 and "!status" in text
        status, text = await slash("status", n=1)
        assert status == 200 and "No conversation" in text
        assert await event(app.port, vector("app_mention")) == 200
        await wait_post(fake, "summarize yesterday")
        status, text = await slash("status", n=2)
        assert status == 200 and "thread" in text
        (answer,) = await wait_post(fake, "Idle")
        assert answer.args["thread_ts"] == MENTION_TS and answer.args["channel"] == CHANNEL
        # a DM the bot has no conversation in (one between two people: a reply posted
        # there would be refused) is told so, and nothing is posted there
        status, text = await slash("new", channel=DM, n=3)
        assert status == 200 and "No conversation" in text
        assert not [c for c in fake.calls if c.args.get("channel") == DM]
        assert await event(app.port, vector("direct_message")) == 200
        await wait_post(fake, "deploy config", channel=DM)
        status, _ = await slash("new", channel=DM, n=4)
        assert status == 200
        (fresh,) = await wait_post(fake, "fresh conversation", channel=DM)
        assert "thread_ts" not in fresh.args


async def test_jazz_new_with_a_question_runs_the_question(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        assert await event(app.port, vector("direct_message")) == 200
        await wait_post(fake, "deploy config", channel=DM)
        status, text = await send(
            app.port, dm_slash("new is 2 &lt; 3 &amp; true?", "trigger-review4-1"), form=True
        )
        assert status == 200, (status, text)
        await wait_post(fake, "fresh conversation", channel=DM)
        # the reference runner echoes the prompt: the question itself is answered
        await wait_post(fake, "is 2 < 3 & true?", channel=DM)


async def test_a_command_that_could_not_be_stored_says_so(
    env: dict[str, str], fake: FakeSlackApi, tiny_state: Path
) -> None:
    async with running_gateway(env) as (app, client):
        assert await event(app.port, vector("direct_message")) == 200
        await wait_post(fake, "deploy config", channel=DM)
        filler = fill(tiny_state)
        await refuses_writes(client)
        status, text = await send(
            app.port, dm_slash("status", "trigger-review4-full-disk"), form=True
        )
        assert status == 200, (status, text)
        assert "NOT" in text and "full" in text, text
        filler.unlink()
        status, text = await send(
            app.port, dm_slash("status", "trigger-review4-full-disk"), form=True
        )
        assert status == 200 and "the answer is here" in text, (status, text)
        await wait_post(fake, "Idle", channel=DM)


async def test_the_help_in_a_slack_dm_says_to_start_commands_with_a_bang(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        assert await event(app.port, message("Ev0DMHELP", "!help", channel=DM, ts="17.1")) == 200
        (help_post,) = await wait_post(fake, "Commands", channel=DM)
        text = str(help_post.args.get("markdown_text") or help_post.args.get("text"))
        assert help_post.args.get("thread_ts") is None  # the DM itself, no thread
        assert "`!new`" in text
        assert "in a Slack thread" not in text and "`/new`" not in text, text  # "!" wherever


async def test_the_directive_list_the_runner_points_to_is_reachable_from_slack(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    # single-account, the bundled reference runner (the gateway's own default)
    env["JAZZ_BRIDGE_ISOLATION"] = "off"
    env.pop("JAZZ_BRIDGE_RUNNER__COMMAND", None)
    async with running_gateway(env) as (app, _client):
        root = "1764700000.000100"
        assert await event(app.port, mention("Ev0RRHELP1", "hello there", ts=root)) == 200
        (echo,) = [c for c in await wait_post(fake, "not an AI", timeout=60)]
        text = str(echo.args.get("markdown_text") or echo.args.get("text"))
        pointer = re.search(r"send `(![a-z-]+)`", text)
        assert pointer, f"the runner's answer names no directive for its list:\n{text}"
        asked = pointer.group(1)
        body = mention("Ev0RRHELP2", asked, ts="1764700000.000200", thread_ts=root)
        assert await event(app.port, body) == 200

        def answered() -> bool:
            return bool(_texts(fake, "Directives in a message") or _texts(fake, "Commands"))

        try:
            await wait_until(answered, 60, f"an answer to {asked!r}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the fake Slack API saw {seen(fake)}") from None
        assert _texts(fake, "Directives in a message"), (
            f"{asked!r}, as the runner said to send, got the gateway's command help on "
            f"Slack, not the runner's directive list: {_texts(fake, 'Commands')}"
        )
