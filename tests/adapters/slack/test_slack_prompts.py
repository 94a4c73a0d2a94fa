"""The agent's prompts and the Stop button on Slack: only the person a prompt asks (or an
operator, for a Stop) may answer it, an answered prompt and a finished run lose their
buttons (a 429 on that edit is waited out, not dropped), a press is acked within Slack's
three seconds, a button from an earlier process is told expired, a press the gateway cannot
store (its disk full) is told to the presser, and a secret sent as a thread reply to the
gateway's prompt in a DM answers that prompt instead of starting a conversation."""

from __future__ import annotations

import asyncio
import copy
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
    TEAM,
    action,
    buttons,
    event,
    mention,
    message,
    posted_ts,
    posts,
    press_payload,
    seen,
    vector,
    wait_post,
)

from bridge.model import InboxState

SECRET_VALUE = "hunter2-very-secret-value"


async def test_only_the_requester_may_answer_and_the_buttons_go_away(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        # a stale button first: "expired", said only to the presser
        assert await action(app.port, vector("block_actions")) == 200
        await wait_until(lambda: bool(fake.called("chat.postEphemeral")), 10, "an ephemeral")
        (stale,) = fake.called("chat.postEphemeral")
        assert "expired" in stale.args["text"] and stale.args["user"] == ADA

        assert (
            await event(app.port, mention("Ev0ASK", "!approve bash", ts="1764669800.000100")) == 200
        )
        (prompt,) = await wait_post(fake, "Approval needed")
        assert prompt.args["thread_ts"] == "1764669800.000100"
        approve = next(b for b in buttons(prompt) if b["text"]["text"] == "Approve")
        ts = posted_ts(fake, prompt)

        assert await action(app.port, press_payload(approve["value"], GRACE, prompt, ts)) == 200
        await wait_until(lambda: len(fake.called("chat.postEphemeral")) == 2, 10, "ephemeral")
        refusal = fake.called("chat.postEphemeral")[-1]
        assert refusal.args["user"] == GRACE and refusal.args["text"].startswith("Only")
        assert "can answer" in refusal.args["text"]
        assert refusal.args["thread_ts"] == "1764669800.000100"
        assert not posts(fake, "approved")  # Grace's press answered nothing

        assert await action(app.port, press_payload(approve["value"], ADA, prompt, ts)) == 200
        await wait_post(fake, "bash")  # the run goes on and answers
        await wait_until(
            lambda: any(c.args.get("ts") == ts for c in fake.called("chat.update")),
            10,
            "the prompt message updated",
        )
        update = next(c for c in fake.called("chat.update") if c.args.get("ts") == ts)
        assert not buttons(update) and "approved" in update.args["text"].lower()
        assert len(fake.called("chat.postEphemeral")) == 2


async def test_an_answered_prompt_loses_its_buttons_even_after_a_429(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    """The press's chat.update is rate limited once: it is held and sent when Slack reopens
    (not dropped with a warning, leaving buttons on an answered prompt)."""
    async with running_gateway(env) as (app, _client):
        ask = mention("Ev0ASK429", "!approve bash", ts="1764669900.000100")
        assert await event(app.port, ask) == 200
        (prompt,) = await wait_post(fake, "Approval needed")
        approve = next(b for b in buttons(prompt) if b["text"]["text"] == "Approve")
        ts = posted_ts(fake, prompt)
        fake.fail("chat.update", "429", retry_after=1, when=lambda a: a.get("ts") == ts)
        assert await action(app.port, press_payload(approve["value"], ADA, prompt, ts)) == 200

        def settled() -> list[Any]:
            return [c for c in fake.called("chat.update") if c.args.get("ts") == ts]

        await wait_until(lambda: bool(settled()), 15, "the prompt updated after the 429")
        assert any(c.args.get("ts") == ts for c in fake.called("chat.update", ok=False))
        assert not buttons(settled()[-1]) and "approved" in settled()[-1].args["text"].lower()


async def test_an_expired_stop_button_loses_its_button_when_pressed(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    """A progress bubble left by an earlier process (a crash: nothing turned it into a
    summary) still shows "working" and a Stop button. Pressing it, the core answers EXPIRED
    with ``resolved`` ("This run has ended.", no buttons): the bubble is edited to it, as on
    Telegram, and the presser is still told (ephemeral), not left with a stale button."""
    stale_stop = "AbCdEfGhIjKlMnOp.stop"  # the shape prompts.new_token() + ".stop" has
    stop_button = {
        "type": "button",
        "action_id": "jb_choice_0",
        "text": {"type": "plain_text", "text": "Stop"},
        "value": stale_stop,
        "style": "danger",
    }
    bubble = fake._post(
        {
            "channel": CHANNEL,
            "thread_ts": MENTION_TS,
            "text": "working… 12s",
            "blocks": [
                {"type": "markdown", "text": "working… 12s"},
                {"type": "actions", "block_id": "jb_choices_0", "elements": [stop_button]},
            ],
        }
    )
    ts = bubble["ts"]
    async with running_gateway(env) as (app, _client):
        payload = copy.deepcopy(vector("block_actions"))
        payload["container"].update(message_ts=ts, thread_ts=MENTION_TS, channel_id=CHANNEL)
        payload["message"].update(ts=ts, thread_ts=MENTION_TS)
        payload["actions"][0].update(value=stale_stop, action_id="jb_choice_0")
        assert await action(app.port, payload) == 200
        try:
            await wait_until(
                lambda: any(c.args.get("ts") == ts for c in fake.called("chat.update")),
                10,
                "the stale bubble edited without its Stop button",
            )
            await wait_until(
                lambda: bool(fake.called("chat.postEphemeral")), 10, "the presser told"
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the fake saw {seen(fake)}") from None
        (msg,) = [m for m in fake.messages[CHANNEL] if m["ts"] == ts]
        assert not [b for b in msg.get("blocks") or [] if b.get("type") == "actions"]
        assert "ended" in str(msg.get("text"))
        (told,) = fake.called("chat.postEphemeral")
        assert told.args["user"] == ADA and told.args["thread_ts"] == MENTION_TS


async def test_a_stop_press_is_acked_within_slacks_three_seconds(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    """Slack wants an interaction acked within 3 seconds, else it shows the presser an error.
    _on_action acks after the core's press(); for a Stop that must return at once, not once
    the runner has exited (SIGTERM, then up to runner.kill_grace_s): a runner slow to exit
    must not make the Stop press "fail" in Slack although the run does stop."""
    env["JAZZ_BRIDGE_RUNNER__KILL_GRACE_S"] = "5"
    async with running_gateway(env) as (app, _client):
        root = "1764669950.000100"
        assert await event(app.port, mention("Ev0SLOWSTOP", "!ignore-term", ts=root)) == 200

        def bubble() -> list[Call]:
            return [c for c in fake.called("chat.postMessage") if buttons(c)]

        await wait_until(lambda: bool(bubble()), 15, "a progress message with a Stop button")
        (stop,) = buttons(bubble()[0])
        payload = press_payload(stop["value"], ADA, bubble()[0], posted_ts(fake, bubble()[0]))
        started = asyncio.get_running_loop().time()
        status = await asyncio.wait_for(action(app.port, payload), timeout=20)
        took = asyncio.get_running_loop().time() - started
        assert status == 200
        await wait_post(fake, "Stopped by", timeout=20)
        assert took < 3.0, f"the Stop press was acked after {took:.1f}s (Slack allows 3s)"


async def test_an_operators_stop_names_them_as_slack_shows_a_person(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    env["JAZZ_BRIDGE_SLACK__OPERATORS"] = f'["{GRACE}"]'
    async with running_gateway(env) as (app, _client):
        root = "1764695000.000100"
        assert await event(app.port, mention("Ev0RVOPS1", "!delay 30", ts=root)) == 200

        def bubble() -> list[Call]:
            return [c for c in fake.called("chat.postMessage") if buttons(c)]

        await wait_until(lambda: bool(bubble()), 15, "a progress message with a Stop button")
        (stop,) = buttons(bubble()[0])
        ts = posted_ts(fake, bubble()[0])
        # Grace, an operator, stops Ada's run
        assert await action(app.port, press_payload(stop["value"], GRACE, bubble()[0], ts)) == 200
        (stopped,) = await wait_post(fake, "Stopped by")
        text = str(stopped.args.get("markdown_text") or stopped.args.get("text"))
        assert f"<@{GRACE}>" in text, text


async def test_a_press_the_gateway_could_not_take_is_told_to_the_presser(
    env: dict[str, str], fake: FakeSlackApi, tiny_state: Path
) -> None:
    async with running_gateway(env) as (app, client):
        asked = mention("Ev0PFAIL1", "!approve bash", ts="1764669800.000100")
        assert await event(app.port, asked) == 200
        (prompt,) = await wait_post(fake, "Approval needed")
        approve = next(b for b in buttons(prompt) if b["text"]["text"] == "Approve")
        press = press_payload(approve["value"], ADA, prompt, posted_ts(fake, prompt))

        filler = fill(tiny_state)
        await refuses_writes(client)
        assert await action(app.port, press) == 200
        await wait_until(
            lambda: bool(fake.called("chat.postEphemeral")), 10, "a word to the presser"
        )
        (told,) = fake.called("chat.postEphemeral")
        assert told.args["user"] == ADA and "try again" in told.args["text"], told.args
        assert told.args["thread_ts"] == "1764669800.000100"

        filler.unlink()
        assert await action(app.port, press) == 200
        await wait_post(fake, "bash")  # the same button now answers it, and the run goes on


async def test_a_secret_sent_as_a_thread_reply_to_the_dm_prompt_answers_it(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    async with running_gateway(env) as (app, _client):
        ask = message("Ev0RVSEC1", "!secret API_TOKEN", ts="1764680000.000100", channel=DM)
        assert await event(app.port, ask) == 200
        (prompt,) = await wait_post(fake, "Send it as your next message", channel=DM)
        assert "thread_ts" not in prompt.args  # a DM prompt is posted top-level
        prompt_ts = posted_ts(fake, prompt)

        # Ada uses Slack's "Reply in thread" on the prompt and sends the secret there
        reply = message(
            "Ev0RVSEC2", SECRET_VALUE, ts="1764680010.000100", channel=DM, thread_ts=prompt_ts
        )
        assert await event(app.port, reply) == 200

        def settled() -> bool:
            return bool(posts(fake, "got a secret of", channel=DM)) or bool(
                posts(fake, SECRET_VALUE, channel=DM)
            )

        await wait_until(settled, 30, "the secret answered, or run as a prompt")
        leaked = [
            str(c.args.get("markdown_text") or c.args.get("text"))
            for c in posts(fake, SECRET_VALUE)
        ]
        assert not leaked, f"the secret was run as a prompt and echoed: {leaked[0][:200]}"
        assert posts(fake, "got a secret of", channel=DM)
        stored: list[Any] = []
        for state in InboxState:
            stored += await app.store.messages_in_state(state)
        assert not [m for m in stored if SECRET_VALUE in m.text], "the secret is kept un-redacted"
        keys = {m.thread_key for m in stored}
        assert keys == {f"slack:{TEAM}:{DM}"}, keys
