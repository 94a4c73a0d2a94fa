"""Review: a chat.postMessage that Slack carries out *after* the client gave up on it.

Slack under load answers late: the client's timeout (``slack.api_timeout_s``) fires, the
post is "unclear", and the thread is searched for its reply key before a resend. That search
runs about one second after the timeout (the delivery's first backoff), while Slack may
still be working on the first request: the key is not there yet, the reply is sent again,
and then the first request lands too. The person sees the answer twice, which the README
says cannot happen on Slack ("looked up by a key before any resend").
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bridge"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_slack_api import FakeSlackApi
from gateway_harness import running_gateway, use_reference_runner, wait_until
from test_slack import CHANNEL, MENTION_TS, event, sample, vector


@pytest.fixture
def env(env: dict[str, str], fake_dir: Path) -> dict[str, str]:
    use_reference_runner(env, fake_dir)
    env["JAZZ_BRIDGE_SLACK__API_TIMEOUT_S"] = "1"
    return env


async def test_a_late_post_is_not_resent_before_slack_could_have_finished_it(
    env: dict[str, str], fake: FakeSlackApi
) -> None:
    started: list[float] = []  # every answer post that reached Slack (each is answered)

    def reached(args: dict[str, object]) -> bool:
        if "incident notes" in str(args.get("markdown_text")):
            started.append(1.0)
        return False  # only counts: never fails a request

    fake.fail("chat.postMessage", "5xx", times=1_000_000, when=reached)
    # the answer's first post: Slack takes 3 s (the client gives up after 1 s), then posts it
    fake.fail(
        "chat.postMessage",
        "slow",
        stall_s=3.0,
        when=lambda a: "incident notes" in str(a.get("markdown_text")),
    )
    async with running_gateway(env) as (app, _client):
        assert await event(app.port, vector("app_mention")) == 200

        def answers() -> list[dict[str, object]]:
            return [m for m in fake.thread(CHANNEL, MENTION_TS) if "incident notes" in m["text"]]

        def finished() -> int:  # answer posts Slack has carried out and answered
            return len(
                [
                    c
                    for c in fake.calls
                    if c.method == "chat.postMessage"
                    and "incident notes" in str(c.args.get("markdown_text"))
                ]
            )

        await wait_until(
            lambda: (
                sample(app, "jazz_bridge_replies_total", surface="slack", result="sent")
                + sample(app, "jazz_bridge_replies_total", surface="slack", result="confirmed")
                >= 1
            ),
            30,
            "the answer recorded as delivered",
        )
        # every post that reached Slack is done (the slow one included) before counting
        await wait_until(lambda: finished() == len(started) >= 1, 15, "Slack's posts done")
        assert len(answers()) == 1, f"the answer was posted {len(answers())} times"
